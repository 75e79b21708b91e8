// browse.mjs: open pages of Temporal's Web UI in a real headless Chromium and
// wait until each page's rendered text holds what is expected.
//
//   node --experimental-websocket browse.mjs --chromium PATH --out DIR \
//        --page NAME URL TEXT[|TEXT...] [--page ...] [--timeout-s S]
//
// For each page: navigate, poll document.body.innerText every 250 ms until
// every TEXT occurs in it (or the deadline passes), then write
// DIR/NAME.txt (the rendered text) and DIR/NAME.png (a screenshot).
// Exit status 0 when every page showed every text, 1 otherwise (the missing
// texts are printed), 2 on a usage or browser error. Talks to Chromium over
// the DevTools protocol on loopback (no npm dependency: Node's WebSocket).
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, rmSync, existsSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

function usage(msg) {
  console.error(`browse.mjs: ${msg}`);
  process.exit(2);
}

const args = process.argv.slice(2);
let chromium = 'chromium', out = null, timeoutS = 60;
const pages = [];
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === '--chromium') chromium = args[++i];
  else if (a === '--out') out = args[++i];
  else if (a === '--timeout-s') timeoutS = Number(args[++i]);
  else if (a === '--page') {
    if (i + 3 >= args.length) usage('--page needs NAME URL TEXTS');
    pages.push({ name: args[i + 1], url: args[i + 2], texts: args[i + 3].split('|') });
    i += 3;
  } else usage(`unknown argument '${a}'`);
}
if (!out || pages.length === 0) usage('need --out DIR and at least one --page');
if (!(timeoutS > 0)) usage('--timeout-s must be a positive number');
mkdirSync(out, { recursive: true });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const profile = mkdtempSync(join(tmpdir(), 'durabox-chromium-'));
const browser = spawn(chromium, [
  '--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-extensions',
  '--remote-debugging-port=0', `--user-data-dir=${profile}`, '--window-size=1400,1000', 'about:blank',
], { stdio: ['ignore', 'ignore', 'ignore'] });
let browserExited = false;
browser.on('exit', () => { browserExited = true; });
browser.on('error', (e) => { console.error(`browse.mjs: cannot start ${chromium}: ${e.message}`); process.exit(2); });

function cleanup() {
  if (!browserExited) browser.kill('SIGKILL');
  try { rmSync(profile, { recursive: true, force: true, maxRetries: 5 }); } catch { /* chromium may still be writing its profile */ }
}

async function devtoolsPort() {
  const f = join(profile, 'DevToolsActivePort');
  for (let t = 0; t < 200; t++) {
    if (browserExited) throw new Error('chromium exited before opening its DevTools port');
    if (existsSync(f)) {
      const port = Number(readFileSync(f, 'utf8').split('\n')[0]);
      if (port > 0) return port;
    }
    await sleep(100);
  }
  throw new Error('chromium did not open its DevTools port within 20 s');
}

class Cdp {
  constructor(ws) {
    this.ws = ws; this.next = 1; this.waiting = new Map();
    ws.onmessage = (ev) => {
      const m = JSON.parse(ev.data);
      if (m.id && this.waiting.has(m.id)) {
        const { ok, fail } = this.waiting.get(m.id);
        this.waiting.delete(m.id);
        if (m.error) fail(new Error(`${m.error.message}`)); else ok(m.result);
      }
    };
  }
  send(method, params = {}) {
    const id = this.next++;
    this.ws.send(JSON.stringify({ id, method, params }));
    return new Promise((ok, fail) => this.waiting.set(id, { ok, fail }));
  }
}

async function main() {
  const port = await devtoolsPort();
  const res = await fetch(`http://127.0.0.1:${port}/json/new?about:blank`, { method: 'PUT' });
  const target = await res.json();
  const ws = new WebSocket(target.webSocketDebuggerUrl);
  await new Promise((ok, fail) => { ws.onopen = ok; ws.onerror = () => fail(new Error('DevTools websocket failed')); });
  const cdp = new Cdp(ws);
  await cdp.send('Page.enable');
  await cdp.send('Runtime.enable');
  let failed = 0;
  for (const p of pages) {
    await cdp.send('Page.navigate', { url: p.url });
    const deadline = Date.now() + timeoutS * 1000;
    let text = '', missing = p.texts;
    while (Date.now() < deadline) {
      await sleep(250);
      const r = await cdp.send('Runtime.evaluate', {
        expression: 'document.body ? document.body.innerText : ""', returnByValue: true,
      });
      text = String(r.result.value ?? '');
      missing = p.texts.filter((t) => !text.includes(t));
      if (missing.length === 0) break;
    }
    writeFileSync(join(out, `${p.name}.txt`), text);
    const shot = await cdp.send('Page.captureScreenshot', { format: 'png' });
    writeFileSync(join(out, `${p.name}.png`), Buffer.from(shot.data, 'base64'));
    if (missing.length) {
      failed++;
      console.log(`page ${p.name} (${p.url}): missing ${missing.map((m) => JSON.stringify(m)).join(', ')} ` +
                  `after ${timeoutS} s; its text is in ${join(out, p.name + '.txt')}`);
    } else {
      console.log(`page ${p.name}: shows ${p.texts.map((m) => JSON.stringify(m)).join(', ')}`);
    }
  }
  ws.close();
  return failed ? 1 : 0;
}

main().then((rc) => { cleanup(); process.exit(rc); },
            (e) => { console.error(`browse.mjs: ${e.message}`); cleanup(); process.exit(2); });
