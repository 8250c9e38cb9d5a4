"""Databento's live authentication (CRAM): the gateway sends a challenge; the client answers
sha256("challenge|key") in hex, a dash, and the key's bucket id (its last 5 characters)."""
import hashlib
import secrets


def challenge():
    return secrets.token_urlsafe(24)


def answer(challenge_text, key):
    """The `auth=` value a client holding `key` sends."""
    return hashlib.sha256(f"{challenge_text}|{key}".encode()).hexdigest() + "-" + key[-5:]
