// browse.mjs: open pages of Temporal's Web UI in a real headless Chromium,
// click through it as a person would, and wait until the rendered text holds
// what is expected.
//
//   node --experimental-websocket browse.mjs --chromium PATH --out DIR [--timeout-s S] STEP...
//   STEP: --page NAME URL TEXT[|TEXT...]   open URL, then --expect NAME TEXTS
//         --open URL                       navigate
//         --expect NAME TEXT[|TEXT...]     poll document.body.innerText every
//                                          250 ms until every TEXT occurs in it
//                                          (or the deadline), then write
//                                          DIR/NAME.txt and DIR/NAME.png
//         --click TEXT                     wait for a button, link, option or
//                                          menu item whose text is TEXT, click it
//         --clickables NAME                write DIR/NAME.json: what --click
//                                          could click now (for writing tests)
// Exit status 0 when every expectation held, 1 otherwise (the missing texts
// and unclickable elements are printed), 2 on a usage or browser error.
// Talks to Chromium over the DevTools protocol on loopback (no npm
// dependency: Node's WebSocket).
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
const steps = [];
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  const need = (n) => { if (i + n >= args.length) usage(`${a} needs ${n} value(s)`); };
  if (a === '--chromium') { need(1); chromium = args[++i]; }
  else if (a === '--out') { need(1); out = args[++i]; }
  else if (a === '--timeout-s') { need(1); timeoutS = Number(args[++i]); }
  else if (a === '--page') {
    need(3);
    steps.push({ kind: 'open', url: args[i + 2] });
    steps.push({ kind: 'expect', name: args[i + 1], texts: args[i + 3].split('|') });
    i += 3;
  } else if (a === '--open') { need(1); steps.push({ kind: 'open', url: args[++i] }); }
  else if (a === '--expect') {
    need(2);
    steps.push({ kind: 'expect', name: args[i + 1], texts: args[i + 2].split('|') });
    i += 2;
  } else if (a === '--click') { need(1); steps.push({ kind: 'click', text: args[++i] }); }
  else if (a === '--clickables') { need(1); steps.push({ kind: 'clickables', name: args[++i] }); }
  else usage(`unknown argument '${a}'`);
}
if (!out || !steps.some((st) => st.kind === 'expect')) usage('need --out DIR and at least one --page or --expect');
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
  const until = Date.now() + 90000; // a loaded machine starts chromium slowly
  while (Date.now() < until) {
    if (browserExited) throw new Error('chromium exited before opening its DevTools port');
    if (existsSync(f)) {
      const port = Number(readFileSync(f, 'utf8').split('\n')[0]);
      if (port > 0) return port;
    }
    await sleep(100);
  }
  throw new Error('chromium did not open its DevTools port within 90 s');
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
  // the clickable element whose own text is TEXT (the last one: a menu opened
  // later sits after the button that opened it); clicked inside the page
  const clickJs = (text) => `(() => {
    const want = ${JSON.stringify(text)};
    const els = [...document.querySelectorAll('button, a, [role=option], [role=menuitem], li, label')]
      .filter((e) => e.innerText && e.innerText.trim() === want && e.getClientRects().length > 0);
    if (els.length === 0) return false;
    els[els.length - 1].click();
    return true;
  })()`;
  let url = '';
  for (const st of steps) {
    if (st.kind === 'open') {
      url = st.url;
      await cdp.send('Page.navigate', { url: st.url });
      continue;
    }
    const deadline = Date.now() + timeoutS * 1000;
    if (st.kind === 'clickables') {
      const r = await cdp.send('Runtime.evaluate', {
        expression: `JSON.stringify([...document.querySelectorAll('button, a, [role=option], [role=menuitem], li, label')]
          .filter((e) => e.getClientRects().length > 0).map((e) => [e.tagName, e.innerText.trim(), e.disabled === true]))`,
        returnByValue: true,
      });
      writeFileSync(join(out, `${st.name}.json`), String(r.result.value));
      continue;
    }
    if (st.kind === 'click') {
      let done = false;
      while (!done && Date.now() < deadline) {
        await sleep(250);
        const r = await cdp.send('Runtime.evaluate', { expression: clickJs(st.text), returnByValue: true });
        done = r.result.value === true;
      }
      if (!done) {
        failed++;
        console.log(`${url}: nothing to click with the text ${JSON.stringify(st.text)} within ${timeoutS} s`);
      }
      continue;
    }
    let text = '', missing = st.texts;
    while (Date.now() < deadline) {
      await sleep(250);
      const r = await cdp.send('Runtime.evaluate', {
        expression: 'document.body ? document.body.innerText : ""', returnByValue: true,
      });
      text = String(r.result.value ?? '');
      missing = st.texts.filter((t) => !text.includes(t));
      if (missing.length === 0) break;
    }
    writeFileSync(join(out, `${st.name}.txt`), text);
    const shot = await cdp.send('Page.captureScreenshot', { format: 'png' });
    writeFileSync(join(out, `${st.name}.png`), Buffer.from(shot.data, 'base64'));
    if (missing.length) {
      failed++;
      console.log(`page ${st.name} (${url}): missing ${missing.map((m) => JSON.stringify(m)).join(', ')} ` +
                  `after ${timeoutS} s; its text is in ${join(out, st.name + '.txt')}`);
    } else {
      console.log(`page ${st.name}: shows ${st.texts.map((m) => JSON.stringify(m)).join(', ')}`);
    }
  }
  ws.close();
  return failed ? 1 : 0;
}

main().then((rc) => { cleanup(); process.exit(rc); },
            (e) => { console.error(`browse.mjs: ${e.message}`); cleanup(); process.exit(2); });
