"""Standard Webhooks signatures (https://www.standardwebhooks.com/). Pure functions."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable

from notifications.rules.secrets import decode_key


def secret_key(secret: str) -> bytes:
    """The HMAC key inside a `whsec_<base64>` secret (prefix optional), read as leniently as standardwebhooks does."""
    return decode_key(secret, strict=False)


def signature(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`."""
    signed = b"%s.%d.%s" % (msg_id.encode(), timestamp, body)
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def signature_header(keys: Iterable[bytes], msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` value: one signature per key, space-separated (rotation)."""
    return " ".join(signature(key, msg_id, timestamp, body) for key in keys)


def headers(keys: Iterable[bytes], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers for one attempt."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature_header(keys, msg_id, timestamp, body),
    }
