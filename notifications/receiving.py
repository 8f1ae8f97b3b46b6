"""Verify this app's webhooks on the receiving side (Standard Webhooks, v1 signatures).

For host projects that receive the queue's webhooks, with no extra dependency. It
checks the `webhook-signature` header against every configured key in constant time
and refuses a `webhook-timestamp` more than five minutes away from now, so a
captured request cannot be replayed later. The `standardwebhooks` package verifies
the same messages; use whichever you prefer.

An example Django view::

    import json

    from django.http import HttpResponse, HttpResponseBadRequest
    from django.views.decorators.csrf import csrf_exempt
    from django.views.decorators.http import require_POST

    from notifications.receiving import InvalidWebhook, verify_request


    @csrf_exempt  # signed by the sender, not a browser form
    @require_POST
    def notification_hook(request):
        try:
            event = verify_request(request)  # keys default to NOTIFICATIONS_WEBHOOK_SECRET
        except InvalidWebhook as exc:
            return HttpResponseBadRequest(str(exc))
        # `webhook-id` is the same for every attempt of one firing: de-duplicate on it.
        handle(event["id"], event["notification_id"], event["payload"])
        return HttpResponse(status=204)

Answer 2xx quickly once the message is stored: anything else, or taking longer than
the sender's deadline, counts as a failure and is retried.
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from notifications.exceptions import NotificationsError
from notifications.rules import signing
from notifications.rules.secrets import SECRET_PREFIX, decode_key

DEFAULT_TOLERANCE = 5 * 60  # seconds a webhook-timestamp may differ from now


class InvalidWebhook(NotificationsError):
    """The request is not a genuine, fresh webhook. The message names no secret."""


def _header(headers: Mapping[str, str], name: str) -> str:
    # Django's request.headers is case-insensitive; a plain dict may not be.
    value = headers.get(name)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    if not value:
        raise InvalidWebhook(f"missing {name} header")
    return value


def _keys(secrets: str | Iterable[str]) -> list[bytes]:
    secrets = [secrets] if isinstance(secrets, str) else list(secrets)
    keys = []
    for secret in filter(None, secrets):
        try:
            key = decode_key(secret)
        except ValueError:
            key = b""
        if not key:
            # Never echo the value: this message may end up in a log.
            raise ValueError(f"a webhook secret is not {SECRET_PREFIX} followed by base64")
        keys.append(key)
    if not keys:
        raise ValueError("no webhook secret to verify with")
    return keys


def signature_matches(keys: Iterable[bytes], msg_id: str, timestamp: int, body: bytes, offered: str) -> bool:
    """Whether a `v1` signature of the `webhook-signature` value `offered` matches one of `keys`.

    Every candidate pair is compared with compare_digest (constant time per comparison)
    and the loop never stops early, so the time taken says nothing about which part
    matched. Signatures of other schemes (`v1a`: asymmetric) are not ours and never match.
    """
    expected = [signing.signature(key, msg_id, timestamp, body).encode() for key in keys]
    matched = False
    for candidate in offered.split():
        version, _, _sig = candidate.partition(",")
        if version != "v1":
            continue
        for sig in expected:
            matched |= hmac.compare_digest(sig, candidate.encode())
    return matched


def verify(
    body: bytes,
    headers: Mapping[str, str],
    secrets: str | Iterable[str],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> dict[str, Any]:
    """Check a received webhook and return its JSON body.

    `headers` holds `webhook-id`, `webhook-timestamp` and `webhook-signature`;
    `secrets` is one `whsec_...` secret or several (during a key rotation any one
    may match). Raises InvalidWebhook when a header is missing, the timestamp is
    further than `tolerance` seconds from `now`, or no signature matches; raises
    ValueError when `secrets` itself is unusable (a setup problem, not a bad request).
    """
    keys = _keys(secrets)
    msg_id = _header(headers, "webhook-id")
    raw_timestamp = _header(headers, "webhook-timestamp")
    offered = _header(headers, "webhook-signature")
    try:
        timestamp = int(raw_timestamp)
    except ValueError:
        raise InvalidWebhook("webhook-timestamp is not a number") from None
    now = time.time() if now is None else now
    if abs(now - timestamp) > tolerance:
        raise InvalidWebhook("webhook-timestamp is outside the tolerance")
    if not signature_matches(keys, msg_id, timestamp, body, offered):
        raise InvalidWebhook("no valid signature")
    try:
        event = json.loads(body)
    except ValueError:
        raise InvalidWebhook("body is not JSON") from None
    if not isinstance(event, dict):
        raise InvalidWebhook("body is not a JSON object")
    return event


def verify_request(
    request: Any,
    secrets: str | Iterable[str] | None = None,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
) -> dict[str, Any]:
    """`verify` for a Django `HttpRequest`; `secrets` default to NOTIFICATIONS_WEBHOOK_SECRET."""
    if secrets is None:
        from notifications.conf import app_settings

        secrets = app_settings.webhook_secrets
    return verify(request.body, request.headers, secrets, tolerance=tolerance)
