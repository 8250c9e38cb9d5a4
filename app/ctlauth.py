"""Control-plane authentication over TCP that never sends the token, and where the engine proves
itself first (so a process squatting the port while the engine is down learns nothing).

  client: GET /auth/challenge?c=CNONCE          (CNONCE: 32 random bytes, hex)
  engine: {"nonce": SNONCE, "proof": HMAC(token, "engine-server" CNONCE SNONCE)}
  client: checks the proof (hmac.compare_digest); only then
          Authorization: Engine-HMAC SNONCE MAC   MAC = HMAC(token, "engine-client" CNONCE SNONCE METHOD PATH)

HMAC-SHA256 over NUL-separated fields; the two labels keep a server proof from ever being a
client MAC. A server nonce is good once, for NONCE_TTL_S, and at most MAX_NONCES are
outstanding (the oldest go first), so a flood of challenges costs bounded memory. The MAC binds
the method and path: a relay cannot turn a `status` into a `pause`.
"""
import hashlib
import hmac
import re
import secrets
import time
from collections import OrderedDict

SCHEME = "Engine-HMAC"
NONCE_TTL_S = 10.0
MAX_NONCES = 4096
_HEX = re.compile(r"[0-9a-f]{32,128}")


def _mac(token, *fields):
    return hmac.new(token.encode(), b"\0".join(f.encode() for f in fields), hashlib.sha256).hexdigest()


def server_proof(token, cnonce, snonce):
    return _mac(token, "engine-server", cnonce, snonce)


def client_mac(token, cnonce, snonce, method, path):
    return _mac(token, "engine-client", cnonce, snonce, method, path)


def valid_nonce(n):
    return isinstance(n, str) and _HEX.fullmatch(n) is not None


class Challenges:
    """The engine's side: outstanding server nonces, each good once."""

    def __init__(self):
        self._open = OrderedDict()  # snonce -> (cnonce, expiry)

    def issue(self, token, cnonce):
        now = time.monotonic()
        while self._open and (len(self._open) >= MAX_NONCES or next(iter(self._open.values()))[1] < now):
            self._open.popitem(last=False)
        snonce = secrets.token_hex(32)
        self._open[snonce] = (cnonce, now + NONCE_TTL_S)
        return {"nonce": snonce, "proof": server_proof(token, cnonce, snonce)}

    def check(self, token, header, method, path):
        """True if header is a valid Engine-HMAC answer to one of our open challenges (used up)."""
        parts = header.split()
        if len(parts) != 3 or parts[0] != SCHEME:
            return False
        snonce, mac = parts[1], parts[2]
        got = self._open.pop(snonce, None)
        if got is None or got[1] < time.monotonic():
            return False
        return hmac.compare_digest(mac.encode("utf-8", "surrogateescape"),
                                   client_mac(token, got[0], snonce, method, path).encode())
