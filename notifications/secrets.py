"""Webhook signing secrets: `whsec_` followed by the base64 of the HMAC key. Stdlib only.

The one definition of the format, for every place that reads a secret: validation of a
row's `webhook_secret`, the system check of NOTIFICATIONS_WEBHOOK_SECRET, signing on the
way out and verification on the receiving side. A leaf module, so that the pure
modules (`signing`, `receiving`) can use it without loading the rest of the app.
"""

from __future__ import annotations

import base64

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
MIN_KEY_BYTES = 24  # the shortest key a row or the site may sign with


def decode_key(secret: str, *, strict: bool = True) -> bytes:
    """The HMAC key inside `whsec_<base64>`; the prefix is optional.

    Strict decoding refuses anything but base64 with a ValueError (binascii.Error is
    one). Lenient decoding skips characters outside the base64 alphabet, as the
    standardwebhooks package does, and still raises on bad padding.
    """
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=strict)


def secret_errors(secret: str) -> list[str]:
    """Why `secret` cannot sign: it must be `whsec_` + base64 of at least MIN_KEY_BYTES bytes.

    The messages never echo the value: they end up in forms, check output and logs.
    """
    if not secret.startswith(SECRET_PREFIX):
        return [f"A webhook secret starts with {SECRET_PREFIX!r}."]
    try:
        key = decode_key(secret)
    except ValueError:
        return [f"A webhook secret is {SECRET_PREFIX!r} followed by base64."]
    if len(key) < MIN_KEY_BYTES:
        return [f"A webhook secret must hold at least {MIN_KEY_BYTES} bytes."]
    return []
