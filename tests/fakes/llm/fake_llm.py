#!/usr/bin/env python3
"""A scripted OpenAI-compatible chat-completions server on loopback.

POST /v1/chat/completions (also /chat/completions) answers from a script
file, replaying a conversation: the reply given to a request is chosen by
the request's turn, the number of messages with role "assistant" it already
holds, so a repeated request (a retry, a replay that wrongly called the
model) gets the same reply and shows twice in the log.

Script (JSON): {"replies": [REPLY, ...]} where REPLY is
  {"content": "text" | null,
   "tool_calls": [{"name": "shell", "arguments": {...} | "raw text"}, ...],
   "usage": {"prompt_tokens": N, "completion_tokens": N},   (default 10/5)
   "faults": ["429", "500", "malformed", "no_choices", "bad_tool_call"],
   "expect": "text the newest message of the request must contain"}
The faults are answered in order to the first requests of that turn, one
each, before the reply itself: 429 (with Retry-After: 0) and 500 are error
statuses with an OpenAI-style error body; "malformed" is a 200 whose body is
not JSON; "no_choices" a 200 JSON object without "choices"; "bad_tool_call"
a 200 whose tool call has no function name. A request past the last reply,
or whose newest message lacks "expect", gets 400 naming the problem.

--key KEY: requests must carry "Authorization: Bearer KEY" (else 401).
--log FILE: one JSON line per request: {"n", "turn", "status", "auth_ok",
  "model", "messages", "tools", "last_role", "last_content"}; never the key.
--port-file FILE: written with the port once listening on 127.0.0.1.
Python 3 standard library only.
"""
import argparse
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"n": 0, "served": {}}
ARGS = None
SCRIPT = None


def log(entry):
    if not ARGS.log:
        return
    with open(ARGS.log, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()
        os.fsync(f.fileno())


def reply_body(turn, reply):
    calls = []
    for i, c in enumerate(reply.get("tool_calls") or []):
        args = c.get("arguments", {})
        if not isinstance(args, str):
            args = json.dumps(args)
        calls.append({"id": "call_%d_%d" % (turn, i), "type": "function",
                      "function": {"name": c["name"], "arguments": args}})
    msg = {"role": "assistant", "content": reply.get("content")}
    if calls:
        msg["tool_calls"] = calls
    usage = reply.get("usage") or {}
    pt, ct = usage.get("prompt_tokens", 10), usage.get("completion_tokens", 5)
    return {"id": "chatcmpl-fake-%d" % turn, "object": "chat.completion",
            "model": "fake-model",
            "choices": [{"index": 0, "message": msg,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": pt, "completion_tokens": ct,
                      "total_tokens": pt + ct}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send(self, status, body, ctype="application/json", extra=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n)
        if self.path not in ("/v1/chat/completions", "/chat/completions"):
            self.send(404, {"error": {"message": "no route " + self.path}})
            return
        auth_ok = ARGS.key is None or \
            self.headers.get("Authorization") == "Bearer " + ARGS.key
        try:
            req = json.loads(raw)
            msgs = req["messages"]
        except Exception:
            self.send(400, {"error": {"message": "request is not a chat request"}})
            return
        turn = sum(1 for m in msgs if m.get("role") == "assistant")
        last = msgs[-1] if msgs else {}
        content = last.get("content") if isinstance(last.get("content"), str) else ""
        with LOCK:
            STATE["n"] += 1
            seq = STATE["n"]
            served = STATE["served"].get(turn, 0)
            STATE["served"][turn] = served + 1
        entry = {"n": seq, "turn": turn, "auth_ok": auth_ok, "model": req.get("model"),
                 "messages": len(msgs), "tools": [t.get("function", {}).get("name")
                                                  for t in req.get("tools") or []],
                 "last_role": last.get("role"), "last_content": content[:2000]}
        status, body, extra, ctype = 200, None, None, "application/json"
        replies = SCRIPT.get("replies", [])
        if not auth_ok:
            status, body = 401, {"error": {"message": "bad api key"}}
        elif turn >= len(replies):
            status, body = 400, {"error": {"message": "the script has no reply for turn %d" % turn}}
        else:
            reply = replies[turn]
            faults = reply.get("faults") or []
            want = reply.get("expect")
            if served < len(faults):
                f = faults[served]
                if f == "429":
                    status, body, extra = 429, {"error": {"message": "rate limited"}}, {"Retry-After": "0"}
                elif f == "500":
                    status, body = 500, {"error": {"message": "internal error"}}
                elif f == "malformed":
                    body, ctype = b"{this is not json", "application/json"
                elif f == "no_choices":
                    body = {"id": "x", "object": "chat.completion"}
                elif f == "bad_tool_call":
                    body = reply_body(turn, {"tool_calls": [{"name": "x"}]})
                    del body["choices"][0]["message"]["tool_calls"][0]["function"]["name"]
            elif want is not None and want not in content:
                status, body = 400, {"error": {"message": "turn %d: the newest message lacks %r" % (turn, want)}}
            else:
                body = reply_body(turn, reply)
        entry["status"] = status
        log(entry)
        self.send(status, body, ctype, extra)


def main():
    global ARGS, SCRIPT
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", required=True)
    ap.add_argument("--log")
    ap.add_argument("--key")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ARGS = ap.parse_args()
    with open(ARGS.script, encoding="utf-8") as f:
        SCRIPT = json.load(f)
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
