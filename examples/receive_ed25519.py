"""A genrelay webhook receiver for Ed25519 signatures (`v1a`, a client with `signature: "ed25519"`),
with the `cryptography` package: the client's public key alone verifies, no shared secret.

    pip install cryptography
    GENRELAY_PUBLIC_KEY=whpk_… python3 receive_ed25519.py    # PORT (default 3000), HOST (default 127.0.0.1)

GENRELAY_PUBLIC_KEY is `public_key` of GET /openapi/v1/webhooks/settings: "whpk_" + base64 of the
raw 32-byte key. After a key rotation the previous key signs beside the new one for 24 hours.
"""
import base64
import binascii
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

KEY = Ed25519PublicKey.from_public_bytes(base64.b64decode(os.environ["GENRELAY_PUBLIC_KEY"].removeprefix("whpk_")))
seen = set()  # ids of the events handled; keep them in your database in production


def verified(headers, body):
    """The event, or None when no `v1a` signature verifies or the timestamp is more than 5 minutes off."""
    msg_id, ts = headers.get("webhook-id"), headers.get("webhook-timestamp", "")
    if not msg_id or not ts.isdigit() or abs(time.time() - int(ts)) > 300:
        return None
    content = f"{msg_id}.{ts}.".encode() + body  # "{id}.{timestamp}.{raw body}"
    for entry in headers.get("webhook-signature", "").split(" "):  # two entries during a rotation
        version, _, signature = entry.partition(",")
        if version != "v1a":
            continue
        try:
            KEY.verify(base64.b64decode(signature, validate=True), content)
            return json.loads(body)
        except (InvalidSignature, binascii.Error):
            pass
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
