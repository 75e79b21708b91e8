#!/usr/bin/env python3
"""A fake of GitHub's pull-request API on loopback, with a request log.

POST /repos/{owner}/{repo}/pulls {"title", "head", "base", "body"?} creates a
pull request (201 {"number", "html_url", "url", "state": "open", "title",
"head": {"ref"}, "base": {"ref"}}); numbers count from 1. A second open pull
request with the same head answers 422 as GitHub does ("A pull request
already exists for ..."). GET /repos/{owner}/{repo}/pulls?head=OWNER:BRANCH
lists the open ones of that head.

--token TOKEN: requests must carry "Authorization: Bearer TOKEN" or
"token TOKEN" (else 401). --fail-first N: the first N creates answer 502.
--drop-first N: the first N creates are made, then the connection is
closed with no reply (the caller cannot tell whether it happened).
--log FILE: one JSON line per request {"n", "method", "path", "status",
"auth_ok", "body"} (the request body; never the token).
--port-file FILE: written with the port once listening on 127.0.0.1.
Python 3 standard library only.
"""
import argparse
import json
import os
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
PRS = []
STATE = {"n": 0, "fail": 0}
ARGS = None


def log(entry):
    if ARGS.log:
        with open(ARGS.log, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def handle_one(self, method):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        auth = self.headers.get("Authorization") or ""
        auth_ok = ARGS.token is None or auth in ("Bearer " + ARGS.token, "token " + ARGS.token)
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        try:
            body = json.loads(raw) if raw else None
        except Exception:
            body = None
        with LOCK:
            STATE["n"] += 1
            entry = {"n": STATE["n"], "method": method, "path": url.path, "auth_ok": auth_ok,
                     "body": body}
            status, out = self.route(method, parts, url, body, auth_ok)
            drop = method == "POST" and status == 201 and STATE.setdefault("dropped", 0) < ARGS.drop_first
            if drop:
                STATE["dropped"] += 1
                entry["dropped"] = True
            entry["status"] = status
            log(entry)
        if drop:
            self.close_connection = True
            return
        self.send(status, out)

    def route(self, method, parts, url, body, auth_ok):
        if not auth_ok:
            return 401, {"message": "Bad credentials"}
        if len(parts) != 4 or parts[0] != "repos" or parts[3] != "pulls":
            return 404, {"message": "Not Found"}
        repo = parts[1] + "/" + parts[2]
        if method == "GET":
            q = urllib.parse.parse_qs(url.query)
            head = (q.get("head") or [""])[0].split(":")[-1]
            return 200, [p for p in PRS if p["repo"] == repo and (not head or p["head"]["ref"] == head)]
        if not isinstance(body, dict) or not all(isinstance(body.get(k), str) for k in ("title", "head", "base")):
            return 422, {"message": "Validation Failed", "errors": [{"message": "title, head, base required"}]}
        if STATE["fail"] < ARGS.fail_first:
            STATE["fail"] += 1
            return 502, {"message": "Server Error"}
        for p in PRS:
            if p["repo"] == repo and p["head"]["ref"] == body["head"]:
                return 422, {"message": "Validation Failed",
                             "errors": [{"message": "A pull request already exists for %s:%s." % (parts[1], body["head"])}]}
        num = len(PRS) + 1
        pr = {"number": num, "repo": repo, "state": "open", "title": body["title"],
              "body": body.get("body"), "head": {"ref": body["head"]}, "base": {"ref": body["base"]},
              "url": "http://127.0.0.1:%d/repos/%s/pulls/%d" % (self.server.server_address[1], repo, num),
              "html_url": "https://github.invalid/%s/pull/%d" % (repo, num)}
        PRS.append(pr)
        return 201, pr

    def do_POST(self):
        self.handle_one("POST")

    def do_GET(self):
        self.handle_one("GET")


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--log")
    ap.add_argument("--token")
    ap.add_argument("--fail-first", type=int, default=0)
    ap.add_argument("--drop-first", type=int, default=0)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ARGS = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    port = srv.server_address[1]
    if ARGS.port_file:
        tmp = ARGS.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, ARGS.port_file)
    print("PORT %d" % port, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
