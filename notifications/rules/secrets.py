"""Webhook signing secrets: `whsec_` followed by the base64 of the HMAC key. Stdlib only.

The one definition of the format, for every place that reads a secret: validation of a
row's `webhook_secret`, the system check of NOTIFICATIONS_WEBHOOK_SECRET, signing on the
way out and verification on the receiving side. A leaf module, so that the pure
modules (`signing`, `receiving`) can use it without loading the rest of the app.
"""

from __future__ import annotations

import base64
import functools

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


# What a webhook that needs the site's secret reports when the site has none it can sign
# with: a configuration problem (`manage.py check`: notifications.E010, W010), held by the
# tick rather than retried.
NO_SITE_SECRET = "webhook: no signing secret configured (NOTIFICATIONS_WEBHOOK_SECRET is empty)"  # noqa: S105
MALFORMED_SITE_SECRET = "webhook: NOTIFICATIONS_WEBHOOK_SECRET is malformed"  # noqa: S105


@functools.lru_cache(maxsize=16)
def site_secret_problem(secrets: tuple[str, ...] | None) -> str | None:
    """Why the site cannot sign with `secrets` (NOTIFICATIONS_WEBHOOK_SECRET as
    `conf.parse_secrets` reads it: None when not a string or a list of strings), or None
    when every key is usable. Never echoes a value."""
    if secrets is None or any(secret_errors(s) for s in secrets):
        return MALFORMED_SITE_SECRET
    if not secrets:
        return NO_SITE_SECRET
    return None
