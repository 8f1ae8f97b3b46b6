"""Opaque signed tokens: what a link carries, sealed so that its reader learns nothing.

A mail forwarded to a list hands its links to every reader, so a link must not tell the
site's internal id for the person (`user:42`) and still must take its holder to that
person's choices. What a link needs is known at the click: the one-click POST turns a
category off for a recipient, the preference centre opens one recipient's choices. Where
it could come from:

- a table of opaque ids (one row per recipient): a write for every link a worker builds,
  and workers touch no database; erasure would have one more table to clear;
- a hash of the recipient, looked up among rows or preferences: the row is long deleted
  when a person clicks, and a preference exists only once they chose;
- the token itself, encrypted: no table, no query, nothing to erase. Chosen.

How: the value (JSON) is encrypted with a keystream of HMAC-SHA256 blocks (a PRF in
counter mode, keyed from SECRET_KEY per purpose), then signed with `django.core.signing`
(encrypt-then-MAC), so a changed character fails the signature before anything is read.
The nonce is synthetic (an HMAC of the value under a key of its own): one value gives one
token, so a retried message carries the same links, and all a reader can tell is that two
links are the same link. The standard library only; no dependency.

Keys: sealed with SECRET_KEY, opened with it or any of SECRET_KEY_FALLBACKS (the key whose
signature holds is the key that decrypts), so rotating keeps links working while the old
key stays a fallback. Tokens do not expire: a mail client may POST months later.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from django.conf import settings
from django.core import signing
from django.utils.crypto import salted_hmac

NONCE_BYTES = 16
BLOCK_BYTES = hashlib.sha256().digest_size


def seal(value: Any, purpose: str) -> str:
    """`value` (JSON) as an opaque token that only `open_sealed(token, purpose)` reads."""
    secret = settings.SECRET_KEY
    plain = json.dumps(value, separators=(",", ":")).encode()
    nonce = hmac.new(_key(purpose, "nonce", secret), plain, hashlib.sha256).digest()[:NONCE_BYTES]
    sealed = nonce + _xor(plain, _keystream(_key(purpose, "cipher", secret), nonce, len(plain)))
    return _signer(purpose, secret).sign(signing.b64_encode(sealed).decode())


def open_sealed(token: str, purpose: str) -> Any | None:
    """The value `seal` sealed into `token` for `purpose`; None for anything else (forged,
    altered, another purpose's, sealed under a key the site no longer has)."""
    for secret in [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS]:
        try:
            data = _signer(purpose, secret).unsign(token)
        except signing.BadSignature:
            continue
        try:
            sealed = signing.b64_decode(data.encode())
            nonce, cipher = sealed[:NONCE_BYTES], sealed[NONCE_BYTES:]
            return json.loads(_xor(cipher, _keystream(_key(purpose, "cipher", secret), nonce, len(cipher))))
        except (ValueError, UnicodeError):  # signed by us, so never expected: refuse rather than crash
            return None
    return None


def _signer(purpose: str, secret: str | bytes) -> signing.Signer:
    # One key at a time (no fallbacks): the key that signed is the key that decrypts.
    return signing.Signer(key=secret, salt=f"{purpose}.sealed", fallback_keys=[])


def _key(purpose: str, use: str, secret: str | bytes) -> bytes:
    return salted_hmac(f"{purpose}.{use}", "notifications.tokens", secret=secret, algorithm="sha256").digest()


def _keystream(key: bytes, nonce: bytes, length: int) -> bytes:
    blocks = -(-length // BLOCK_BYTES)
    return b"".join(hmac.new(key, nonce + i.to_bytes(4, "big"), hashlib.sha256).digest() for i in range(blocks))


def _xor(data: bytes, stream: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, stream, strict=False))
