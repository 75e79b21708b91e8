#!/usr/bin/env python3
"""A git smart-HTTP server on loopback with Basic authentication, for tests.

Serves the bare repositories under --root through `git http-backend` (CGI),
fetch and push, to requests whose Authorization header carries --user and
--password; any other request gets 401 with a WWW-Authenticate challenge.
Every request is logged to --log (one JSON object a line: method, path,
"auth": "none" | "ok" | "bad", status), never the credentials themselves.

Usage: git_http.py --root DIR --user U --password P [--log FILE] [--port-file F]
Prints "PORT <n>" once it listens on 127.0.0.1. Python 3 standard library.
"""
import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
LOG_LOCK = threading.Lock()


def log(entry):
    if not ARGS.log:
        return
    with LOG_LOCK, open(ARGS.log, "a") as f:
        f.write(json.dumps(entry) + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _body(self):
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _send(self, status, headers, data):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _serve(self):
        u = urllib.parse.urlsplit(self.path)
        body = self._body()
        auth = "none"
        h = self.headers.get("Authorization") or ""
        if h.startswith("Basic "):
            try:
                user, _, pw = base64.b64decode(h[6:]).decode().partition(":")
            except ValueError:
                user, pw = "", ""
            auth = "ok" if (user, pw) == (ARGS.user, ARGS.password) else "bad"
        entry = {"t": time.time(), "method": self.command, "path": u.path, "auth": auth}
        if auth != "ok":
            entry["status"] = 401
            log(entry)
            return self._send(401, [("WWW-Authenticate", 'Basic realm="git"'),
                                    ("Content-Type", "text/plain")], b"authentication required\n")
        env = dict(os.environ, GIT_PROJECT_ROOT=ARGS.root, GIT_HTTP_EXPORT_ALL="1",
                   PATH_INFO=u.path, QUERY_STRING=u.query, REQUEST_METHOD=self.command,
                   CONTENT_TYPE=self.headers.get("Content-Type") or "",
                   CONTENT_LENGTH=str(len(body)), REMOTE_USER=ARGS.user, REMOTE_ADDR="127.0.0.1",
                   GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null")
        for k in ("Content-Encoding", "Git-Protocol"):
            if self.headers.get(k):
                env["HTTP_" + k.upper().replace("-", "_")] = self.headers.get(k)
        p = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True)
        head, _, data = p.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, data = p.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.strip().split()[0])
            elif k:
                headers.append((k, v.strip()))
        entry["status"] = status
        log(entry)
        self._send(status, headers, data)

    do_GET = do_POST = _serve


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password", required=True)
    ap.add_argument("--log")
    ap.add_argument("--port-file")
    ARGS = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    port = srv.server_address[1]
    if ARGS.port_file:
        with open(ARGS.port_file + ".tmp", "w") as f:
            f.write("%d\n" % port)
        os.replace(ARGS.port_file + ".tmp", ARGS.port_file)
    print("PORT %d" % port, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    parent = os.getppid()

    def orphan_watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)
    threading.Thread(target=orphan_watch, daemon=True).start()
    srv.serve_forever()


if __name__ == "__main__":
    main()
