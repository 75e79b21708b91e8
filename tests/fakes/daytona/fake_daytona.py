#!/usr/bin/env python3
"""A fake Daytona server on loopback for durabox's tests.

It follows shared/reference/daytona-api.md: the control-plane API under
/api (sandbox create/get/list/start/stop/delete/snapshot, /snapshots) and the
toolbox under /toolbox/{sandboxId}/... (the sandbox DTO's toolboxProxyUrl
points there). Sandboxes are folders under --root: <root>/sb/<id>/work is the
sandbox work-dir (relative paths resolve there), <root>/sb/<id>/home its
HOME. Commands really run (bash, cwd = work-dir, their own process group),
git really runs.

States change over time: a create answers "creating" and becomes "started"
after --transition-ms; stop, start, delete and snapshot likewise pass through
stopping / starting / destroying / snapshotting. A mutating call during a
transition answers 409 "Sandbox state change in progress".

Faults, set by POST /_control/faults with a JSON object (each key optional,
counters count down per matching request):
  drop_create_reply: N   the next N creates are made, then the connection is
                         closed without a reply
  create_429: N          the next N creates answer 429 (Retry-After below)
  retry_after: S         seconds sent in Retry-After (default 1)
  empty_502: {"match": "substring of the path", "count": N}
                         the next N matching requests answer 502 with an
                         empty body (nothing is done)
  snapshot_mode: "ok" | "silent_fail" | "stuck"
                         ok: the snapshot goes pending -> active; silent_fail:
                         the sandbox goes snapshotting -> started and no
                         snapshot record exists (issue #4990); stuck: pending
                         forever
  transition_ms: N       how long transitions take
  vanish: "<id or name>" the sandbox disappears (404 from then on)
  drop_reply: {"match": "substring of the path", "count": N}
                         the next N matching requests are done, then the
                         connection is closed without a reply
  lifecycle_409: N       the next N start/stop/snapshot calls answer 409
                         "Sandbox state change in progress" (nothing done)
  http_error: {"match": "substring of the path", "status": S, "count": N}
                         the next N matching requests answer S (401, 403 ...)
                         with an API error body (nothing is done)
  echo_body: {"match": "substring of the path", "status": S, "count": N,
              "pad": P}
                         the next N matching requests answer S with an API
                         error whose message quotes the request's body (as a
                         validating proxy does; nothing is done), after P
                         dashes (default 0)
  git_auth: {"username": U, "password": P}
                         /git/clone and /git/push then need exactly these in
                         their username / password fields, else 401
                         GIT_AUTH_FAILED (as a remote refusing them); null:
                         no check
Secrets (reference section 5): POST /secret, GET /secret[/paginated]?name=,
GET|PATCH|DELETE /secret/{id}; a create's "secrets" or PUT
/sandbox/{id}/secrets mounts them; commands see ENV=<placeholder>, and the
egress model swaps a mounted secret's placeholder, sent as the password of
/git/clone, /git/push or /git/pull, for its value when the remote's host is
one of the secret's hosts (what Daytona's egress proxy does).
Control endpoints (no auth): GET /_control/log -> {"requests": [{"t", "method",
"path", "query", "status", "source", "sdk_version", "auth", "body"}]} (auth is
true/false, never the key; body: a JSON request body as the client sent it,
so a test can assert what reached Daytona), GET /_control/sandboxes ->
{"items": [...]}, GET /_control/secrets -> {"items": [...]} (no values), POST
/_control/reset (forget the log), GET /_control/snapshots -> {"items": [{"name", "state",
"dir"}]} and POST /_control/snapshots/forget {"name": N} (the snapshot is gone).

Usage: fake_daytona.py --root DIR [--port-file FILE] [--api-key KEY]
Prints "PORT <n>" on stdout once it listens on 127.0.0.1 (port 0: any).
Python 3 standard library only.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.RLock()
ARGS = None
STATE = {
    "sandboxes": {},   # id -> dict
    "snapshots": {},   # name -> dict
    "sessions": {},    # (sandbox id, session id) -> {"commands": {cid: cmd}}
    "secrets": {},     # name -> {"id", "name", "value", "placeholder", "hosts", ...}
    "log": [],
    "faults": {"transition_ms": 300, "retry_after": 1, "snapshot_mode": "ok"},
}


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def now():
    return time.monotonic()


class Reply(Exception):
    def __init__(self, status, body=None, headers=None, raw=None):
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}
        self.raw = raw


class Drop(Exception):
    """Close the connection without a reply."""


def api_error(status, message, path, error=None):
    names = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
             408: "Request Timeout", 409: "Conflict", 429: "Too Many Requests",
             500: "Internal Server Error"}
    return Reply(status, {"path": path, "timestamp": now_iso(), "statusCode": status,
                          "error": error or names.get(status, "Error"), "message": message})


def daemon_error(status, message, code, path, method):
    return Reply(status, {"statusCode": status, "message": message, "code": code,
                          "timestamp": now_iso(), "path": path, "method": method,
                          "source": "DAYTONA_DAEMON"})


# ---------------------------------------------------------------- sandboxes

def settle(sb):
    """Finish a transition whose time has come."""
    t = sb.get("_until")
    if t is not None and now() >= t:
        sb["state"] = sb["_next"]
        sb["_until"] = None
        if sb["state"] == "destroyed":
            shutil.rmtree(sb["_root"], ignore_errors=True)
            STATE["sandboxes"].pop(sb["id"], None)


def transition(sb, during, after, desired):
    sb["state"] = during
    sb["desiredState"] = desired
    sb["_next"] = after
    sb["_until"] = now() + STATE["faults"]["transition_ms"] / 1000.0
    sb["updatedAt"] = now_iso()


def find_sandbox(key, path):
    for sb in list(STATE["sandboxes"].values()):
        settle(sb)
    sb = STATE["sandboxes"].get(key)
    if sb is None:
        for s in STATE["sandboxes"].values():
            if s["name"] == key:
                sb = s
                break
    if sb is None or sb.get("_vanished"):
        raise api_error(404, "Sandbox with ID or name %s not found" % key, path)
    return sb


def dto(sb):
    d = {k: v for k, v in sb.items() if not k.startswith("_")}
    return d


def in_transition(sb):
    return sb.get("_until") is not None


def copy_tree(src, dst):
    if os.path.isdir(src):
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)


def create_sandbox(body, path):
    name = body.get("name") or ("sandbox-" + uuid.uuid4().hex[:8])
    for s in list(STATE["sandboxes"].values()):
        settle(s)
    for s in list(STATE["sandboxes"].values()):
        if s["name"] == name and not s.get("_vanished"):
            raise api_error(409, "Sandbox with name %s already exists" % name, path)
    snap = body.get("snapshot")
    snaprec = None
    if snap:
        snaprec = STATE["snapshots"].get(snap)
        if snaprec is None:
            raise api_error(404, "Snapshot %s not found" % snap, path)
        if snaprec["state"] != "active":
            raise api_error(400, "Snapshot %s is %s" % (snap, snaprec["state"]), path)
    sid = str(uuid.uuid4())
    root = os.path.join(ARGS.root, "sb", sid)
    os.makedirs(os.path.join(root, "work"))
    os.makedirs(os.path.join(root, "home"))
    if snaprec:
        copy_tree(snaprec["_dir"], os.path.join(root, "work"))
    labels = body.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise api_error(400, "labels must be an object of strings", path)
    sb = {
        "id": sid, "organizationId": "org-fake", "name": name, "snapshot": snap,
        "user": body.get("user") or "daytona", "env": body.get("env") or {},
        "labels": labels, "public": bool(body.get("public", False)),
        "networkBlockAll": bool(body.get("networkBlockAll", False)),
        "target": body.get("target") or "us", "cpu": body.get("cpu") or 1, "gpu": 0,
        "memory": body.get("memory") or 1, "disk": body.get("disk") or 3,
        "state": "creating", "desiredState": "started", "errorReason": None,
        "recoverable": False, "backupState": "None",
        "autoStopInterval": body.get("autoStopInterval", 15),
        "autoArchiveInterval": body.get("autoArchiveInterval", 10080),
        "autoDeleteInterval": body.get("autoDeleteInterval", -1),
        "buildInfo": body.get("buildInfo"), "createdAt": now_iso(), "updatedAt": now_iso(),
        "sandboxClass": "container",
        "toolboxProxyUrl": "http://127.0.0.1:%d/toolbox" % SERVER_PORT,
        "_root": root,
    }
    if body.get("secrets") is not None:
        mount_secrets(sb, body.get("secrets"), path)
    STATE["sandboxes"][sid] = sb
    transition(sb, "creating", "started", "started")
    return sb


def handle_api(h, method, parts, query, body):
    path = "/" + "/".join(parts)
    f = STATE["faults"]
    if parts[:1] == ["secret"]:
        return handle_secret(method, parts[1:], query, body, path)
    if parts[:1] == ["sandbox"] and len(parts) == 3 and parts[2] == "secrets" and method == "PUT":
        return mount_secrets(find_sandbox(parts[1], path), (body or {}).get("secrets"), path)
    if parts[:1] == ["sandbox"]:
        if len(parts) == 1 and method == "POST":
            if f.get("create_429", 0) > 0:
                f["create_429"] -= 1
                ra = str(f.get("retry_after", 1))
                r = api_error(429, "Rate limit exceeded", path)
                r.headers = {"Retry-After": ra, "Retry-After-sandbox-create": ra,
                             "X-RateLimit-Remaining-sandbox-create": "0"}
                raise r
            sb = create_sandbox(body or {}, path)
            if f.get("drop_create_reply", 0) > 0:
                f["drop_create_reply"] -= 1
                raise Drop()
            return dto(sb)
        if len(parts) == 1 and method == "GET":
            return list_sandboxes(query, path)
        if len(parts) < 2:
            raise api_error(404, "Cannot %s %s" % (method, path), path)
        sb = find_sandbox(parts[1], path)
        if len(parts) == 2 and method == "GET":
            return dto(sb)
        if len(parts) == 2 and method == "DELETE":
            if in_transition(sb):
                raise api_error(409, "Sandbox state change in progress", path)
            kill_sessions(sb["id"])
            transition(sb, "destroying", "destroyed", "destroyed")
            return dto(sb)
        op = parts[2] if len(parts) == 3 else None
        if method == "POST" and op in ("start", "stop", "snapshot"):
            if f.get("lifecycle_409", 0) > 0:
                f["lifecycle_409"] -= 1
                raise api_error(409, "Sandbox state change in progress", path)
            if in_transition(sb):
                raise api_error(409, "Sandbox state change in progress", path)
            if op == "start":
                if sb["state"] != "started":
                    transition(sb, "starting", "started", "started")
                return dto(sb)
            if op == "stop":
                if sb["state"] != "started":
                    raise api_error(400, "Sandbox is not in a stoppable state", path)
                kill_sessions(sb["id"])
                transition(sb, "stopping", "stopped", "stopped")
                return dto(sb)
            return snapshot_sandbox(sb, body or {}, path)
        if method == "GET" and op == "toolbox-proxy-url":
            return {"url": sb["toolboxProxyUrl"]}
        raise api_error(404, "Cannot %s %s" % (method, path), path)
    if parts[:1] == ["snapshots"]:
        for s in list(STATE["snapshots"].values()):
            if s.get("_until") and now() >= s["_until"]:
                s["state"] = "active"
                s["_until"] = None
        if len(parts) == 2 and method == "GET":
            s = STATE["snapshots"].get(parts[1])
            if s is None:
                s = next((x for x in STATE["snapshots"].values() if x["id"] == parts[1]), None)
            if s is None:
                raise api_error(404, "Snapshot %s not found" % parts[1], path)
            return {k: v for k, v in s.items() if not k.startswith("_")}
        if len(parts) == 2 and method == "DELETE":
            s = STATE["snapshots"].get(parts[1])
            if s is None:
                s = next((x for x in STATE["snapshots"].values() if x["id"] == parts[1]), None)
            if s is None:
                raise api_error(404, "Snapshot %s not found" % parts[1], path)
            STATE["snapshots"].pop(s["name"], None)
            shutil.rmtree(s["_dir"], ignore_errors=True)
            return {}
    raise api_error(404, "Cannot %s %s" % (method, path), path)


def list_sandboxes(query, path):
    want = {}
    if "labels" in query:
        try:
            want = json.loads(query["labels"][0])
        except ValueError:
            raise api_error(400, "labels must be a JSON object", path)
        if not isinstance(want, dict):
            raise api_error(400, "labels must be a JSON object", path)
    limit = int(query.get("limit", ["100"])[0])
    if limit < 1 or limit > 200:
        raise api_error(400, "limit must be 1..200", path)
    start = int(query.get("cursor", ["0"])[0] or 0)
    for s in list(STATE["sandboxes"].values()):
        settle(s)
    items = [dto(s) for s in sorted(STATE["sandboxes"].values(), key=lambda s: s["createdAt"])
             if not s.get("_vanished") and all(s["labels"].get(k) == v for k, v in want.items())]
    page = items[start:start + limit]
    nxt = str(start + limit) if start + limit < len(items) else None
    return {"items": page, "nextCursor": nxt}


def snapshot_sandbox(sb, body, path):
    name = body.get("name")
    if not name:
        raise api_error(400, "name is required", path)
    if sb["state"] not in ("started", "stopped"):
        raise api_error(400, "Sandbox must be started or stopped", path)
    if name in STATE["snapshots"]:
        raise api_error(409, "Snapshot with name %s already exists" % name, path)
    prev = sb["state"]
    transition(sb, "snapshotting", prev, prev)
    mode = STATE["faults"].get("snapshot_mode", "ok")
    if mode == "silent_fail":
        return dto(sb)
    d = os.path.join(ARGS.root, "snap", uuid.uuid4().hex)
    copy_tree(os.path.join(sb["_root"], "work"), d)
    os.makedirs(d, exist_ok=True)
    rec = {"id": str(uuid.uuid4()), "name": name, "state": "pending", "createdAt": now_iso(),
           "_dir": d, "_until": None}
    if mode == "ok":
        rec["_until"] = now() + STATE["faults"]["transition_ms"] / 1000.0
    STATE["snapshots"][name] = rec
    return dto(sb)


# ---------------------------------------------------------------- toolbox

def kill_sessions(sbid):
    for key in [k for k in STATE["sessions"] if k[0] == sbid]:
        for c in STATE["sessions"][key]["commands"].values():
            kill_cmd(c)
        del STATE["sessions"][key]


def kill_cmd(c):
    p = c.get("_proc")
    if p is not None and p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass


def reader(stream, buf):
    while True:
        b = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
        if not b:
            break
        with LOCK:
            buf.extend(b)


def run_command(sb, command):
    out, err = bytearray(), bytearray()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.path.join(sb["_root"], "home"),
           "LANG": "C.UTF-8", "GIT_CEILING_DIRECTORIES": os.path.realpath(sb["_root"])}
    env.update({k: v for k, v in (sb.get("env") or {}).items() if isinstance(v, str)})
    env.update(secret_env(sb))
    p = subprocess.Popen(["bash", "-c", command], cwd=os.path.join(sb["_root"], "work"), env=env,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    c = {"id": str(uuid.uuid4()), "command": command, "_proc": p, "_out": out, "_err": err,
         "_threads": []}
    for s, b in ((p.stdout, out), (p.stderr, err)):
        t = threading.Thread(target=reader, args=(s, b), daemon=True)
        t.start()
        c["_threads"].append(t)
    return c


def cmd_exit(c):
    p = c["_proc"]
    rc = p.poll()
    if rc is None:
        return None
    for t in c["_threads"]:  # the exit code only once the output is all read (PR #4422)
        t.join(5)
    return 128 - rc if rc < 0 else rc


def text(b):
    return bytes(b).decode("utf-8", errors="replace")


def resolve(sb, p, path, method):
    if p is None or p == "":
        raise daemon_error(400, "path is required", "BAD_REQUEST", path, method)
    root = os.path.realpath(sb["_root"])
    full = os.path.realpath(p if p.startswith("/") else os.path.join(root, "work", p))
    if full != root and not full.startswith(root + "/"):
        raise daemon_error(403, "access denied: %s" % p, "FILE_ACCESS_DENIED", path, method)
    return full


CRED_HELPER = ("credential.helper=!f() { test \"$1\" = get || exit 0; "
               "printf 'username=%s\\npassword=%s\\n' \"$FAKE_GIT_U\" \"$FAKE_GIT_P\"; }; f")


def git(args, cwd, body=None):
    # never find a repository above the sandbox (the test's temp dir may lie in one)
    ceiling = os.path.realpath(ARGS.root)
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_CEILING_DIRECTORIES=ceiling)
    pre = []
    if body and body.get("password"):  # the daemon hands the fields to git, as Daytona's does
        pre = ["-c", "credential.helper=", "-c", CRED_HELPER]
        env.update(FAKE_GIT_U=body.get("username") or "", FAKE_GIT_P=body["password"])
    r = subprocess.run(["git"] + pre + args, cwd=cwd, capture_output=True, text=True, env=env)
    return r.returncode, (r.stdout + r.stderr).strip()


def handle_toolbox(h, method, parts, query, body, raw):
    path = "/toolbox/" + "/".join(parts)
    if not parts:
        raise Reply(404, raw=b"")
    sbid = parts[0]
    sb = STATE["sandboxes"].get(sbid)
    if sb is not None:
        settle(sb)
        sb = STATE["sandboxes"].get(sbid)
    if sb is None or sb.get("_vanished"):
        raise api_error(404, "Sandbox with ID %s not found" % sbid, path)
    if sb["state"] != "started":
        raise api_error(400, "failed to resolve container IP for sandbox %s. Is the Sandbox started?"
                        % sbid, path)
    rest = parts[1:]
    q = lambda k: query.get(k, [None])[0]
    sdk = h.headers.get("X-Daytona-SDK-Version")
    if rest == ["process", "execute"] and method == "POST":
        c = run_command(sb, body.get("command", ""))
        try:
            c["_proc"].wait(timeout=body.get("timeout") or None)
        except subprocess.TimeoutExpired:
            kill_cmd(c)
            raise daemon_error(408, "command execution timeout", "PROCESS_EXECUTION_TIMEOUT",
                               path, method)
        rc = cmd_exit(c)
        return {"exitCode": rc, "result": text(c["_out"]) + text(c["_err"])}
    if rest[:2] == ["process", "session"]:
        return handle_session(sb, method, rest[2:], body, sdk, path)
    if rest[:1] == ["files"]:
        return handle_files(sb, method, rest[1:], q, raw, path)
    if rest[:1] == ["git"]:
        return handle_git(sb, method, rest[1:], q, body, path)
    if rest == ["work-dir"]:
        return {"dir": os.path.join(sb["_root"], "work")}
    if rest == ["user-home-dir"]:
        return {"dir": os.path.join(sb["_root"], "home")}
    if rest == ["version"]:
        return {"version": "0.205.1-fake"}
    raise daemon_error(404, "Cannot %s %s" % (method, path), "NOT_FOUND", path, method)


def handle_session(sb, method, rest, body, sdk, path):
    if not rest and method == "POST":
        sid = (body or {}).get("sessionId")
        if not sid:
            raise daemon_error(400, "sessionId is required", "BAD_REQUEST", path, method)
        if (sb["id"], sid) in STATE["sessions"]:
            raise daemon_error(409, "session already exists", "CONFLICT", path, method)
        STATE["sessions"][(sb["id"], sid)] = {"commands": {}}
        raise Reply(201, raw=b"")
    if not rest:
        raise daemon_error(404, "Cannot %s %s" % (method, path), "NOT_FOUND", path, method)
    key = (sb["id"], rest[0])
    sess = STATE["sessions"].get(key)
    if sess is None:
        raise daemon_error(404, "session not found", "NOT_FOUND", path, method)
    if len(rest) == 1 and method == "GET":
        return {"sessionId": rest[0], "commands": [cmd_dto(c) for c in sess["commands"].values()]}
    if len(rest) == 1 and method == "DELETE":
        for c in sess["commands"].values():
            kill_cmd(c)
        del STATE["sessions"][key]
        return {}
    if rest[1:] == ["exec"] and method == "POST":
        c = run_command(sb, (body or {}).get("command", ""))
        sess["commands"][c["id"]] = c
        if (body or {}).get("runAsync") or (body or {}).get("async"):
            raise Reply(202, {"cmdId": c["id"]})
        LOCK.release()
        try:
            c["_proc"].wait()
        finally:
            LOCK.acquire()
        rc = cmd_exit(c)
        return {"cmdId": c["id"], "output": text(c["_out"]) + text(c["_err"]),
                "stdout": text(c["_out"]), "stderr": text(c["_err"]), "exitCode": rc}
    if len(rest) >= 3 and rest[1] == "command":
        c = sess["commands"].get(rest[2])
        if c is None:
            raise daemon_error(404, "command not found", "NOT_FOUND", path, method)
        if len(rest) == 3 and method == "GET":
            return cmd_dto(c)
        if rest[3:] == ["logs"] and method == "GET":
            if sdk:
                return {"output": "\x01\x01\x01" + text(c["_out"]) + "\x02\x02\x02" + text(c["_err"]),
                        "stdout": text(c["_out"]), "stderr": text(c["_err"])}
            raise Reply(200, raw=bytes(c["_out"]) + bytes(c["_err"]),
                        headers={"Content-Type": "text/plain"})
    raise daemon_error(404, "Cannot %s %s" % (method, path), "NOT_FOUND", path, method)


def cmd_dto(c):
    d = {"id": c["id"], "command": c["command"]}
    rc = cmd_exit(c)
    if rc is not None:
        d["exitCode"] = rc
    return d


def file_info(full):
    st = os.stat(full)
    return {"name": os.path.basename(full), "path": full, "isDir": os.path.isdir(full),
            "size": st.st_size, "mode": oct(st.st_mode & 0o777), "permissions": oct(st.st_mode & 0o777),
            "owner": "daytona", "group": "daytona",
            "modifiedAt": datetime.datetime.fromtimestamp(st.st_mtime).isoformat()}


def handle_files(sb, method, rest, q, raw, path):
    if rest == ["download"] and method == "GET":
        full = resolve(sb, q("path"), path, method)
        if not os.path.exists(full):
            raise Reply(404, raw=b"")  # v0.190: status only, empty body
        if os.path.isdir(full):
            raise daemon_error(400, "path is a directory", "BAD_REQUEST", path, method)
        with open(full, "rb") as f:
            raise Reply(200, raw=f.read(), headers={"Content-Type": "application/octet-stream"})
    if rest == ["info"] and method == "GET":
        full = resolve(sb, q("path"), path, method)
        if not os.path.exists(full):
            raise daemon_error(404, "file not found", "FILE_NOT_FOUND", path, method)
        return file_info(full)
    if rest in (["upload-v2"], ["upload"]) and method == "POST":
        full = resolve(sb, q("path"), path, method)
        if os.path.isdir(full):
            raise daemon_error(400, "path is a directory", "BAD_REQUEST", path, method)
        try:
            os.makedirs(os.path.dirname(full), exist_ok=True)
        except OSError as e:
            raise daemon_error(400, str(e), "BAD_REQUEST", path, method)
        tmp = full + ".upload-tmp"
        with open(tmp, "wb") as f:
            f.write(raw or b"")
        os.replace(tmp, full)
        return {"name": os.path.basename(full), "path": full, "type": "file"}
    if rest == [] and method == "DELETE":
        full = resolve(sb, q("path"), path, method)
        if not os.path.lexists(full):
            raise daemon_error(404, "file not found", "FILE_NOT_FOUND", path, method)
        if os.path.isdir(full) and not os.path.islink(full):
            if q("recursive") != "true":
                raise daemon_error(400, "directory: recursive needed", "BAD_REQUEST", path, method)
            shutil.rmtree(full)
        else:
            os.unlink(full)
        raise Reply(204, raw=b"")
    if rest == ["folder"] and method == "POST":
        full = resolve(sb, q("path"), path, method)
        os.makedirs(full, exist_ok=True)
        raise Reply(201, raw=b"")
    raise daemon_error(404, "Cannot %s %s" % (method, path), "NOT_FOUND", path, method)


def handle_git(sb, method, rest, q, body, path):
    body = body or {}
    if rest in (["clone"], ["push"], ["pull"]) and method == "POST":
        body = egress(sb, body, body.get("url") if rest == ["clone"] else body.get("remote"))
    want = STATE["faults"].get("git_auth")
    if want and rest in (["clone"], ["push"], ["pull"]) and method == "POST":
        if body.get("username") != want.get("username") or body.get("password") != want.get("password"):
            raise daemon_error(401, "authentication failed for the remote", "GIT_AUTH_FAILED",
                               path, method)
    if rest == ["clone"] and method == "POST":
        full = resolve(sb, body.get("path"), path, method)
        if os.path.isdir(os.path.join(full, ".git")):
            raise daemon_error(409, "repository already exists", "GIT_BRANCH_EXISTS", path, method)
        args = ["clone", "-q"]
        if body.get("branch"):
            args += ["-b", body["branch"]]
        rc, msg = git(args + ["--", body.get("url", ""), full], os.path.join(sb["_root"], "work"),
                      body)
        if rc != 0 and ("Authentication failed" in msg or "could not read Username" in msg):
            raise daemon_error(401, msg, "GIT_AUTH_FAILED", path, method)
        if rc != 0:
            raise daemon_error(404 if "does not exist" in msg or "not found" in msg else 500,
                               msg, "GIT_REPO_NOT_FOUND", path, method)
        if body.get("commit_id"):
            git(["checkout", "-q", body["commit_id"]], full)
        raise Reply(200, raw=b"")
    repo = resolve(sb, body.get("path") if method == "POST" else q("path"), path, method)
    if not os.path.isdir(repo):
        raise daemon_error(404, "path not found", "FILE_NOT_FOUND", path, method)
    if rest == ["status"] and method == "GET":
        rc, msg = git(["status", "--porcelain"], repo)
        if rc != 0:
            raise daemon_error(400, msg, "BAD_REQUEST", path, method)
        _, br = git(["rev-parse", "--abbrev-ref", "HEAD"], repo)
        files = [{"name": l[3:], "staging": l[0], "worktree": l[1], "extra": ""}
                 for l in msg.splitlines() if l.strip()]
        return {"currentBranch": br, "ahead": 0, "behind": 0, "branchPublished": False,
                "detached": False, "fileStatus": files}
    if rest == ["add"] and method == "POST":
        rc, msg = git(["add", "-A", "--"] + (body.get("files") or ["."]), repo)
        if rc != 0:
            raise daemon_error(400, msg, "BAD_REQUEST", path, method)
        return {}
    if rest == ["commit"] and method == "POST":
        args = ["-c", "user.name=%s" % body.get("author", ""), "-c", "user.email=%s" % body.get("email", ""),
                "commit", "-q", "-m", body.get("message", "")]
        if body.get("allow_empty"):
            args.append("--allow-empty")
        rc, msg = git(args, repo)
        if rc != 0:
            raise daemon_error(400, msg, "BAD_REQUEST", path, method)
        _, sha = git(["rev-parse", "HEAD"], repo)
        return {"hash": sha}
    if rest == ["push"] and method == "POST":
        remote = body.get("remote") or "origin"
        ref = "HEAD"
        if body.get("branch"):
            ref = "HEAD:refs/heads/%s" % body["branch"]
        else:
            _, br = git(["rev-parse", "--abbrev-ref", "HEAD"], repo)
            ref = "HEAD:refs/heads/%s" % br
        rc, msg = git(["push", "-q", remote, ref], repo, body)
        if rc != 0 and ("Authentication failed" in msg or "could not read Username" in msg):
            raise daemon_error(401, msg, "GIT_AUTH_FAILED", path, method)
        if rc != 0:
            raise daemon_error(400, msg, "GIT_PUSH_REJECTED", path, method)
        return {}
    if rest == ["pull"] and method == "POST":
        return git_pull(repo, body, path, method)
    raise daemon_error(404, "Cannot %s %s" % (method, path), "NOT_FOUND", path, method)


def git_pull(repo, body, path, method):
    """POST /git/pull {path, remote?, branch?, username?, password?}: a
    fast-forward of the current branch (what durabox asks of it)."""
    args = ["pull", "-q", "--ff-only", "--no-rebase", "--", body.get("remote") or "origin"]
    if body.get("branch"):
        args.append(body["branch"])
    rc, msg = git(args, repo, body)
    if rc != 0 and ("Authentication failed" in msg or "could not read Username" in msg):
        raise daemon_error(401, msg, "GIT_AUTH_FAILED", path, method)
    if rc != 0 and "couldn't find remote ref" in msg:
        raise daemon_error(404, msg, "GIT_BRANCH_NOT_FOUND", path, method)
    if rc != 0:
        raise daemon_error(409, msg, "GIT_MERGE_CONFLICT", path, method)
    return {}


# ---------------------------------------------------------------- secrets
# Organization-scoped secrets (reference section 5): the value is write-only,
# a sandbox that mounts one sees only its placeholder in its environment,
# and the egress model (egress below) swaps the placeholder for the value
# only on git traffic to one of the secret's hosts.

SECRET_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_-]*$")


def secret_dto(rec):
    return {k: v for k, v in rec.items() if k != "value" and not k.startswith("_")}


def secret_by_id(sid, path):
    rec = next((r for r in STATE["secrets"].values() if r["id"] == sid), None)
    if rec is None:
        raise api_error(404, "Secret %s not found" % sid, path)
    return rec


def check_hosts(hosts, path):
    if hosts is None:
        return []
    if not isinstance(hosts, list) or not all(isinstance(x, str) and x and ":" not in x
                                              for x in hosts):
        raise api_error(400, "hosts must be host names (no ports)", path)
    return hosts


def handle_secret(method, rest, query, body, path):
    body = body or {}
    if not rest and method == "POST":
        name, value = body.get("name"), body.get("value")
        if not isinstance(name, str) or not SECRET_NAME.match(name):
            raise api_error(400, "name must match ^[a-zA-Z_][a-zA-Z0-9_-]*$", path)
        if not isinstance(value, str) or not value:
            raise api_error(400, "value is required", path)
        if name in STATE["secrets"]:
            raise api_error(409, "Secret with name %s already exists" % name, path)
        rec = {"id": str(uuid.uuid4()), "name": name, "description": body.get("description"),
               "placeholder": "dtn_secret_" + uuid.uuid4().hex, "value": value,
               "hosts": check_hosts(body.get("hosts"), path), "createdAt": now_iso(),
               "updatedAt": now_iso()}
        STATE["secrets"][name] = rec
        raise Reply(201, secret_dto(rec))
    if rest in ([], ["paginated"]) and method == "GET":
        name = query.get("name", [None])[0]
        items = [secret_dto(r) for r in STATE["secrets"].values() if name in (None, r["name"])]
        return {"items": items, "total": len(items), "nextCursor": None}
    if len(rest) == 1 and method == "GET":
        return secret_dto(secret_by_id(rest[0], path))
    if len(rest) == 1 and method == "PATCH":
        rec = secret_by_id(rest[0], path)
        if isinstance(body.get("value"), str) and body["value"]:
            rec["value"] = body["value"]
        if "hosts" in body:
            rec["hosts"] = check_hosts(body["hosts"], path)
        if "description" in body:
            rec["description"] = body["description"]
        rec["updatedAt"] = now_iso()
        return secret_dto(rec)
    if len(rest) == 1 and method == "DELETE":
        rec = secret_by_id(rest[0], path)
        del STATE["secrets"][rec["name"]]
        raise Reply(204, raw=b"")
    raise api_error(404, "Cannot %s %s" % (method, path), path)


def mount_secrets(sb, secrets, path):
    """secrets: [{ENV: secretName}] replaces the sandbox's set."""
    if not isinstance(secrets, list):
        raise api_error(400, "secrets must be an array", path)
    mounted = {}
    for m in secrets:
        if not isinstance(m, dict) or len(m) != 1:
            raise api_error(400, "each secret is {ENV_NAME: secretName}", path)
        (env, name), = m.items()
        if name not in STATE["secrets"]:
            raise api_error(404, "Secret %s not found" % name, path)
        mounted[env] = name
    sb["_secrets"] = mounted
    return dto(sb)


def secret_env(sb):
    """What the sandbox's processes see: ENV=placeholder, never the value."""
    out = {}
    for env, name in (sb.get("_secrets") or {}).items():
        rec = STATE["secrets"].get(name)
        if rec:
            out[env] = rec["placeholder"]
    return out


def host_allowed(host, hosts):
    for h in hosts:
        if h == host or (h.startswith("*.") and host.endswith(h[1:])):
            return True
    return not hosts  # no hosts: any host (reference section 5)


def egress(sb, body, url):
    """The egress proxy on the sandbox's git traffic: a placeholder of a
    secret the sandbox mounts, sent as the password to an allowed host,
    reaches the remote as the secret's value. A copy of body."""
    body = dict(body or {})
    pw = body.get("password")
    if not isinstance(pw, str) or not pw.startswith("dtn_secret_"):
        return body
    host = urllib.parse.urlsplit(url or "").hostname or ""
    for name in (sb.get("_secrets") or {}).values():
        rec = STATE["secrets"].get(name)
        if rec and rec["placeholder"] == pw and host and host_allowed(host, rec["hosts"]):
            body["password"] = rec["value"]
    return body


# ---------------------------------------------------------------- HTTP

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def _reply(self, status, body=None, headers=None, raw=None):
        e = getattr(self, "_entry", None)
        if e is not None:  # logged before the client can see the reply
            with LOCK:
                e["status"] = status
        data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        self.send_response(status)
        ctype = "application/json"
        for k, v in (headers or {}).items():
            if k.lower() == "content-type":
                ctype = v
        if data or raw is None:
            self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            if k.lower() != "content-type":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _serve(self):
        u = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        parts = [urllib.parse.unquote(p) for p in u.path.split("/") if p]
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        method = self.command
        entry = {"t": time.time(), "method": method, "path": u.path,
                 "query": u.query,
                 "source": self.headers.get("X-Daytona-Source"),
                 "sdk_version": self.headers.get("X-Daytona-SDK-Version"),
                 "auth": self.headers.get("Authorization") == "Bearer " + ARGS.api_key,
                 "status": -1}  # -1: no reply yet
        if (self.headers.get("Content-Type") or "").startswith("application/json") and raw:
            entry["body"] = raw[:4000].decode("utf-8", errors="replace")  # what Daytona gets
        self._entry = None
        if parts[:1] == ["_control"]:
            return self._control(method, parts[1:], raw)
        self._entry = entry
        status = 500
        try:
            with LOCK:
                STATE["log"].append(entry)
                if not entry["auth"]:
                    raise api_error(401, "Unauthorized", u.path)
                he = STATE["faults"].get("http_error")
                if he and he.get("count", 0) > 0 and he.get("match", "") in u.path:
                    he["count"] -= 1
                    raise api_error(int(he.get("status", 403)), "fault: refused", u.path)
                eb = STATE["faults"].get("echo_body")
                if eb and eb.get("count", 0) > 0 and eb.get("match", "") in u.path:
                    eb["count"] -= 1
                    raise api_error(int(eb.get("status", 400)),
                                    "fault: refused body " + "-" * int(eb.get("pad", 0)) +
                                    raw.decode("utf-8", "replace"), u.path)
                e = STATE["faults"].get("empty_502")
                if e and e.get("count", 0) > 0 and e.get("match", "") in u.path:
                    e["count"] -= 1
                    raise Reply(502, raw=b"")
                ctype = (self.headers.get("Content-Type") or "").split(";")[0]
                body = None
                if ctype == "application/json" and raw:
                    try:
                        body = json.loads(raw)
                    except ValueError:
                        raise api_error(400, "body is not JSON", u.path)
                if parts[:1] == ["api"]:
                    res = handle_api(self, method, parts[1:], query, body)
                elif parts[:1] == ["toolbox"]:
                    res = handle_toolbox(self, method, parts[1:], query, body, raw)
                else:
                    raise api_error(404, "Cannot %s %s" % (method, u.path), u.path)
            status = 200
            if self._drop_after(u.path):
                raise Drop()
            self._reply(200, res)
        except Reply as r:
            status = r.status
            if r.status < 300 and self._drop_after(u.path):
                status = 0
                with LOCK:
                    entry["status"] = 0
                self.close_connection = True
                try:
                    self.connection.shutdown(2)
                except OSError:
                    pass
                return
            self._reply(r.status, r.body, r.headers, r.raw)
        except Drop:
            status = 0
            with LOCK:
                entry["status"] = 0
            self.close_connection = True
            try:
                self.connection.shutdown(2)
            except OSError:
                pass
        except Exception as ex:  # a bug of the fake: a 500 that says so
            status = 500
            self._reply(500, {"statusCode": 500, "message": "fake: %r" % ex,
                              "error": "Internal Server Error"})
        finally:
            with LOCK:
                entry["status"] = status

    def _drop_after(self, path):
        """drop_reply fault: the work is done, the reply never sent."""
        with LOCK:
            d = STATE["faults"].get("drop_reply")
            if d and d.get("count", 0) > 0 and d.get("match", "") in path:
                d["count"] -= 1
                return True
        return False

    def _control(self, method, parts, raw):
        with LOCK:
            if parts == ["log"]:
                return self._reply(200, {"requests": list(STATE["log"])})
            if parts == ["reset"]:
                STATE["log"] = []
                return self._reply(200, {})
            if parts == ["faults"] and method == "POST":
                STATE["faults"].update(json.loads(raw or b"{}"))
                v = STATE["faults"].pop("vanish", None)
                if v:
                    for s in STATE["sandboxes"].values():
                        if s["id"] == v or s["name"] == v:
                            s["_vanished"] = True
                            kill_sessions(s["id"])
                return self._reply(200, {k: v for k, v in STATE["faults"].items()})
            if parts == ["secrets"]:  # names, hosts and placeholders, never values
                return self._reply(200, {"items": [secret_dto(r) for r in STATE["secrets"].values()]})
            if parts[:1] == ["snapshots"]:
                return self._control_snapshots(method, parts[1:], raw)
            if parts == ["sandboxes"]:
                for s in list(STATE["sandboxes"].values()):
                    settle(s)
                return self._reply(200, {"items": [dto(s) for s in STATE["sandboxes"].values()
                                                   if not s.get("_vanished")]})
        self._reply(404, {"message": "no such control endpoint"})

    def _control_snapshots(self, method, rest, raw):
        """Snapshots for fork tests (called with LOCK held): GET -> {"items":
        [{"name", "state", "dir"}]} (dir: the snapshot's files, to hash);
        POST /forget {"name": N}: the snapshot is gone (its files too), as
        one deleted or expired on Daytona; 404 when there is none."""
        if method == "GET" and not rest:
            return self._reply(200, {"items": [{"name": x["name"], "state": x["state"], "dir": x["_dir"]}
                                               for x in STATE["snapshots"].values()]})
        if method == "POST" and rest == ["forget"]:
            name = (json.loads(raw or b"{}") or {}).get("name")
            rec = STATE["snapshots"].pop(name, None) if isinstance(name, str) else None
            if rec is None:
                return self._reply(404, {"message": "no snapshot %r" % name})
            shutil.rmtree(rec["_dir"], ignore_errors=True)
            return self._reply(200, {"name": name})
        return self._reply(404, {"message": "no such control endpoint"})

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve


SERVER_PORT = 0


def main():
    global ARGS, SERVER_PORT
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--api-key", default="dtn_fake_key")
    ARGS = ap.parse_args()
    os.makedirs(ARGS.root, exist_ok=True)
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    srv.daemon_threads = True
    SERVER_PORT = srv.server_address[1]
    if ARGS.port_file:
        tmp = ARGS.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % SERVER_PORT)
        os.replace(tmp, ARGS.port_file)
    print("PORT %d" % SERVER_PORT, flush=True)

    def stop(*_):
        with LOCK:
            for s in list(STATE["sandboxes"].values()):
                kill_sessions(s["id"])
        os._exit(0)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    parent = os.getppid()

    def orphan_watch():  # the test that started us died without stopping us: stop too
        while os.getppid() == parent:
            time.sleep(0.5)
        stop()
    threading.Thread(target=orphan_watch, daemon=True).start()
    srv.serve_forever()


if __name__ == "__main__":
    main()
