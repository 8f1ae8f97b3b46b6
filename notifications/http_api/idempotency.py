"""`Idempotency-Key` on a POST: the first answer, kept per token and key in the database so
a repeat on any host replays it and creates nothing.

The record is inserted before the operation runs (its unique constraint decides which of
two concurrent requests is first); the other is answered 409 while the first is in
progress, and the first's answer once it is stored. Another body under the same key is
422. An answer of 5xx, or an operation that raised, forgets the record: the client may
try again. Records older than `RETENTION` are pruned by the tick's housekeeping
(`notifications.store.housekeeping.prune_history`) and ignored until then.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from notifications.http_api.problems import Problem
from notifications.models import ApiToken, IdempotencyRecord
from notifications.models.tokens import IDEMPOTENCY_RETENTION as RETENTION

HEADER = "Idempotency-Key"
MAX_KEY = 200


def run_once(request: HttpRequest, token: ApiToken, key: str, operation: Callable[[], HttpResponse]) -> HttpResponse:
    """The answer to `request` under `key`: the stored one, or `operation`'s, stored."""
    if not key or len(key) > MAX_KEY or not key.isprintable():
        raise Problem(422, f"{HEADER} must be 1 to {MAX_KEY} printable characters.", {HEADER: ["Invalid key."]})
    fingerprint = hashlib.sha256(request.path.encode() + b"\0" + request.body).hexdigest()
    record = _claim(token, key, fingerprint)
    if record.request_hash != fingerprint:
        raise Problem(422, f"This {HEADER} was used with another request.", {HEADER: ["Used with another body."]})
    if record.status is None and not getattr(record, "ours", False):
        raise Problem(409, f"A request with this {HEADER} is still in progress.")
    if record.status is not None:
        return HttpResponse(bytes(record.response), status=record.status, content_type=record.content_type or None)
    try:
        answer = operation()
    except BaseException:
        IdempotencyRecord.objects.filter(pk=record.pk).delete()
        raise
    if answer.status_code >= 500:
        IdempotencyRecord.objects.filter(pk=record.pk).delete()
    else:
        IdempotencyRecord.objects.filter(pk=record.pk).update(
            status=answer.status_code, content_type=answer.get("Content-Type", ""), response=answer.content
        )
    return answer


def _claim(token: ApiToken, key: str, fingerprint: str) -> IdempotencyRecord:
    """The record of (token, key): a new one of ours (`ours` set), or the one stored."""
    now = timezone.now()
    for _ in range(3):  # an expired record in the way is deleted, then the insert tried again
        try:
            with transaction.atomic():
                record = IdempotencyRecord.objects.create(
                    token=token, key=key, request_hash=fingerprint, created_at=now
                )
            record.ours = True  # type: ignore[attr-defined]
            return record
        except IntegrityError:
            pass
        stored = IdempotencyRecord.objects.filter(token=token, key=key).first()
        if stored is None:
            continue  # pruned or forgotten meanwhile
        if stored.created_at > now - RETENTION:
            return stored
        IdempotencyRecord.objects.filter(pk=stored.pk).delete()
    raise Problem(409, f"The {HEADER} keeps changing hands; try again.")
