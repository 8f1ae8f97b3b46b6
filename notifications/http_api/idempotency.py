"""`Idempotency-Key` on a POST: the first answer, kept per token and key in the database so
a repeat on any host replays it and creates nothing.

A request takes the key (a record, committed at once, so every host sees it in
progress) for `NOTIFICATIONS_API_IDEMPOTENCY_LEASE` seconds, then runs the operation
and stores its answer in one transaction: the rows it made and the answer commit
together or not at all. A repeat while the lease runs is 409 (with `Retry-After`); a
repeat after it (the first request's process was killed, its connection lost) takes the
key over with a conditional UPDATE on `attempt`, so of two hosts repeating at once one
wins and the other is 409. Only the holder of the current attempt may store an answer:
a first request that outlived its lease and was taken over rolls back and answers 409,
so the operation's rows are made exactly once. Another body under the same key is 422.
A 5xx answer, or an operation that raised, rolls back and lets the key go: the client
may try again. Records older than `RETENTION` are pruned by the tick's housekeeping
(`notifications.store.housekeeping.prune_history`) and ignored until then.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import Error, IntegrityError, router, transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from notifications.conf import positive_number
from notifications.http_api.problems import Problem, of
from notifications.models import ApiToken, IdempotencyRecord
from notifications.models.tokens import IDEMPOTENCY_RETENTION as RETENTION

HEADER = "Idempotency-Key"
MAX_KEY = 200


def run_once(request: HttpRequest, token: ApiToken, key: str, operation: Callable[[], HttpResponse]) -> HttpResponse:
    """The answer to `request` under `key`: the stored one, or `operation`'s, stored."""
    if not key or len(key) > MAX_KEY or not key.isprintable():
        raise Problem(422, f"{HEADER} must be 1 to {MAX_KEY} printable characters.", {HEADER: ["Invalid key."]})
    fingerprint = hashlib.sha256(request.path.encode() + b"\0" + request.body).hexdigest()
    record, ours = _claim(token, key, fingerprint)
    if record.request_hash != fingerprint:
        raise Problem(422, f"This {HEADER} was used with another request.", {HEADER: ["Used with another body."]})
    if record.status is not None:
        return HttpResponse(bytes(record.response), status=record.status, content_type=record.content_type or None)
    if not ours:
        raise _in_progress(record.leased_until)
    return _run(record, operation)


def _lease() -> timedelta:
    return timedelta(seconds=positive_number("API_IDEMPOTENCY_LEASE"))


def _alias() -> str:
    """The database of the records: the app's, so the queue's rows' too (one transaction)."""
    return router.db_for_write(IdempotencyRecord) or "default"


def _run(record: IdempotencyRecord, operation: Callable[[], HttpResponse]) -> HttpResponse:
    """`operation`'s answer, committed with the rows it made, or neither. (Inside this
    transaction schedule() cannot retry a deadlock itself: that request is a 500, the key
    let go, and the client's repeat runs it afresh.)"""
    alias = _alias()
    try:
        with transaction.atomic(using=alias):
            answer = operation()
            if answer.status_code >= 500:
                transaction.set_rollback(True, using=alias)
            elif not _answered(record, answer):
                # A repeat took the key over: its rows and answer are the ones that count.
                transaction.set_rollback(True, using=alias)
                return of(Problem(409, f"This request outlived its {HEADER}'s lease; a repeat took the key over."))
    except BaseException:
        _let_go(record)
        raise
    if answer.status_code >= 500:
        _let_go(record)
    return answer


def _answered(record: IdempotencyRecord, answer: HttpResponse) -> bool:
    """Store `answer` on `record` if this request still holds the key (in the caller's transaction)."""
    stored = IdempotencyRecord.objects.filter(pk=record.pk, attempt=record.attempt, status=None).update(
        status=answer.status_code, content_type=answer.get("Content-Type", ""), response=answer.content
    )
    return stored == 1


def _let_go(record: IdempotencyRecord) -> None:
    """Forget the key if this request still holds it: a repeat runs the operation afresh."""
    with contextlib.suppress(Error):  # the database is gone too: the lease lets a repeat take the key over
        IdempotencyRecord.objects.filter(pk=record.pk, attempt=record.attempt, status=None).delete()


def _claim(token: ApiToken, key: str, fingerprint: str) -> tuple[IdempotencyRecord, bool]:
    """The record of (token, key) and whether this request now holds it: a new record, one
    whose lease ran out taken over, or (False) the one stored. Read first, so a repeat
    while another request writes needs no write of its own."""
    now = timezone.now()
    for _ in range(3):  # a record changing hands meanwhile is read again
        stored = IdempotencyRecord.objects.filter(token=token, key=key).first()
        if stored is None:
            try:
                with transaction.atomic(using=_alias()):
                    record = IdempotencyRecord.objects.create(
                        token=token, key=key, request_hash=fingerprint, created_at=now, leased_until=now + _lease()
                    )
                return record, True
            except IntegrityError:
                continue  # another request inserted it first
        if stored.created_at <= now - RETENTION:
            IdempotencyRecord.objects.filter(pk=stored.pk, created_at=stored.created_at).delete()
            continue
        if stored.status is None and stored.request_hash == fingerprint and _lapsed(stored, now):
            if _take_over(stored, now):
                return stored, True
            continue
        return stored, False
    raise Problem(409, f"The {HEADER} keeps changing hands; try again.")


def _lapsed(record: IdempotencyRecord, now: datetime) -> bool:
    return record.leased_until is None or record.leased_until <= now


def _take_over(record: IdempotencyRecord, now: datetime) -> bool:
    """Hold `record` from now on, if nobody answered or took it over since it was read
    (the conditional UPDATE on `attempt` lets one of racing repeats win)."""
    until = now + _lease()
    taken = IdempotencyRecord.objects.filter(pk=record.pk, attempt=record.attempt, status=None).update(
        attempt=record.attempt + 1, leased_until=until
    )
    if taken:
        record.attempt, record.leased_until = record.attempt + 1, until
    return taken == 1


def _in_progress(leased_until: datetime | None) -> Problem:
    left = (leased_until - timezone.now()).total_seconds() if leased_until else 0
    return Problem(409, f"A request with this {HEADER} is still in progress.", retry_after=max(1, math.ceil(left)))
