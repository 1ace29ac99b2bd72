"""A genrelay webhook receiver for Ed25519 signatures (`v1a`) whose keys come from the relay's
published JWKS, with the `cryptography` package: no secret and no key to copy by hand.

    pip install cryptography
    GENRELAY_JWKS_URL=https://relay.example.com/openapi/v1/webhooks/jwks/cli_… python3 verify_jwks.py
    # PORT (default 3000), HOST (default 127.0.0.1)

The JWKS lists the client's current key and, during a rotation's 24-hour overlap, the previous one.
It is fetched at start, kept for 5 minutes (its Cache-Control), and fetched again when no key
verifies a signature (a rotation happened), at most once a minute.
"""
import base64
import binascii
import json
import os
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

keys, fetched_at, lock = [], 0.0, threading.Lock()
seen = set()  # ids of the events handled; keep them in your database in production


def refresh_keys():
    global keys, fetched_at
    fetched_at = time.time()
    with urllib.request.urlopen(os.environ["GENRELAY_JWKS_URL"], timeout=10) as res:
        jwks = json.load(res)
    keys = [
        Ed25519PublicKey.from_public_bytes(base64.urlsafe_b64decode(jwk["x"] + "=" * (-len(jwk["x"]) % 4)))
        for jwk in jwks["keys"]
        if jwk.get("kty") == "OKP" and jwk.get("crv") == "Ed25519"
    ]


def signed_by(signatures, content):
    """Whether one `v1a` signature of the header verifies `content` with one of the keys."""
    for entry in signatures.split(" "):  # two entries during a rotation
        version, _, signature = entry.partition(",")
        if version != "v1a":
            continue
        try:
            raw = base64.b64decode(signature, validate=True)
        except binascii.Error:
            continue
        for key in keys:
            try:
                key.verify(raw, content)
                return True
            except InvalidSignature:
                pass
    return False


def verified(headers, body):
    """The event, or None when no `v1a` signature verifies or the timestamp is more than 5 minutes off."""
    msg_id, ts = headers.get("webhook-id"), headers.get("webhook-timestamp", "")
    if not msg_id or not ts.isdigit() or abs(time.time() - int(ts)) > 300:
        return None
    content = f"{msg_id}.{ts}.".encode() + body  # "{id}.{timestamp}.{raw body}"
    signatures = headers.get("webhook-signature", "")
    with lock:
        if time.time() - fetched_at > 300:
            try_refresh()
        if signed_by(signatures, content):
            return json.loads(body)
        if time.time() - fetched_at < 60:
            return None
        try_refresh()  # a new key after a rotation
        return json.loads(body) if signed_by(signatures, content) else None


def try_refresh():
    try:
        refresh_keys()
    except OSError as err:
        print(f"JWKS not fetched: {err}", file=sys.stderr, flush=True)


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
        with lock:
            new = event["id"] not in seen  # delivery is at least once: a retry brings the same id again
            seen.add(event["id"])
        if new:
            handle(event)
        self.answer(204)

    def answer(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass  # one line per event above is enough


refresh_keys()
server = ThreadingHTTPServer((os.environ.get("HOST", "127.0.0.1"), int(os.environ.get("PORT", "3000"))), Receiver)
print(f"listening on http://{server.server_address[0]}:{server.server_address[1]}/hooks/genrelay", flush=True)
server.serve_forever()
