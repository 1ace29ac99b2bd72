"""A genrelay webhook receiver in Python's standard library alone: verifies each message's
Standard Webhooks signature (HMAC, `v1`) and handles each event once.

    GENRELAY_WEBHOOK_SECRET=whsec_… python3 receive_hmac.py    # PORT (default 3000), HOST (default 127.0.0.1)

(A Standard Webhooks library does the same check: `pip install standardwebhooks`, then
`Webhook(secret).verify(body, headers)`.)
"""
import base64
import hashlib
import hmac
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# The key is the base64-decoded part of the client's "whsec_…" secret.
KEY = base64.b64decode(os.environ["GENRELAY_WEBHOOK_SECRET"].removeprefix("whsec_"))
seen = set()  # ids of the events handled; keep them in your database in production


def verified(headers, body):
    """The event, or None when no `v1` signature matches or the timestamp is more than 5 minutes off."""
    msg_id, ts = headers.get("webhook-id"), headers.get("webhook-timestamp", "")
    if not msg_id or not ts.isdigit() or abs(time.time() - int(ts)) > 300:
        return None
    mac = hmac.new(KEY, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256)  # "{id}.{timestamp}.{raw body}"
    expected = base64.b64encode(mac.digest()).decode()
    for entry in headers.get("webhook-signature", "").split(" "):  # one entry per secret during a rotation
        version, _, signature = entry.partition(",")
        if version == "v1" and hmac.compare_digest(signature, expected):
            return json.loads(body)
    return None


def handle(event):
    """Your work goes here (store the output, notify someone…); this one prints the event as one JSON line."""
    print(json.dumps({"id": event["id"], "type": event["type"], "data": event["data"]}), flush=True)  # data["output"], data["usage"]…


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        if self.path != "/hooks/genrelay":
            return self.answer(404)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))  # the raw body, before any JSON parsing
        event = verified(self.headers, body)
        if event is None:
            print(f"rejected: {self.headers.get('webhook-id', '(no webhook-id)')}", file=sys.stderr, flush=True)
            return self.answer(400)  # genrelay retries a non-2xx answer
        if event["id"] not in seen:  # delivery is at least once: a retry brings the same id again
            seen.add(event["id"])
            handle(event)
        self.answer(204)

    def answer(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass  # one line per event above is enough


server = ThreadingHTTPServer((os.environ.get("HOST", "127.0.0.1"), int(os.environ.get("PORT", "3000"))), Receiver)
print(f"listening on http://{server.server_address[0]}:{server.server_address[1]}/hooks/genrelay", flush=True)
server.serve_forever()
