#!/usr/bin/env python3
"""A webhook receiver for tests/integration/test_webhooks.c.

Listens on 127.0.0.1:PORT (0: any free port, written to --port-file) and
appends one JSON line to --log for each request when it arrives and again
when it is answered. Each request's Standard Webhooks signature is verified
here, with Python's hmac (an implementation independent of meter's), against
the secret in --secret-file as it is when the request arrives.

How it answers is read from --script-file on each request: a list such as
"slow:2,500,ok" says how to answer the first, second, third... request
carrying one webhook-id (the last entry answers the rest):
  ok         200
  500        500
  slow:S     waits S seconds, then 200
The secret of a request to /hook/NAME is the file NAME in --secret-dir.
"""
import argparse
import base64
import hashlib
import hmac
import http.server
import json
import os
import threading
import time

lock = threading.Lock()


def verify(secret, msg_id, ts, body, header):
    if not secret.startswith("whsec_"):
        return False
    key = base64.b64decode(secret[len("whsec_"):], validate=True)
    signed = msg_id.encode() + b"." + ts.encode() + b"." + body
    want = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    for sig in header.split(" "):
        version, _, value = sig.partition(",")
        if version == "v1" and hmac.compare_digest(value, want):
            return abs(time.time() - int(ts)) < 300
    return False


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def note(self, **entry):
        with lock, open(self.server.args.log, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def do_POST(self):
        args = self.server.args
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        msg_id = self.headers.get("webhook-id", "")
        ts = self.headers.get("webhook-timestamp", "")
        sig = self.headers.get("webhook-signature", "")
        name = os.path.basename(self.path)
        ok = verify(read(os.path.join(args.secret_dir, name)), msg_id, ts, body, sig)
        script = read(args.script_file, "ok").split(",")
        with lock:
            n = self.server.seen.get(msg_id, 0)
            self.server.seen[msg_id] = n + 1
        mode = script[min(n, len(script) - 1)].split(":")
        self.note(phase="arrived", id=msg_id, path=self.path, verified=ok,
                  content_type=self.headers.get("content-type", ""),
                  body=body.decode("utf-8", "replace"), mode=":".join(mode))
        status = 200
        if mode[0] == "500":
            status = 500
        elif mode[0] == "slow":
            time.sleep(float(mode[1]))
        try:
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()
        except OSError:
            pass
        self.note(phase="answered", id=msg_id, status=status, verified=ok, mode=":".join(mode))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--secret-dir", required=True)
    p.add_argument("--script-file", required=True)
    args = p.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.args = args
    server.seen = {}
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
