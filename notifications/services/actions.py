"""Operator actions on rows in bulk: `RowAction`s that `act` applies to rows re-read
under lock, `requeue` (and its `REQUEUE`), and `purge`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from notifications.databases import let_others_write
from notifications.models import Notification, address_keys
from notifications.models.states import State
from notifications.services import digests, wake
from notifications.store.claims import load_defensively
from notifications.store.statements import lock_in_order, update_rows

REQUEUE_FIELDS = [
    "pending_channels",
    "failed_channels",
    "firing_id",
    "next_fire_at",
    "firing_due_at",
    "error_count",
    "dead_lettered_at",
    "last_error",
    "previous_error",
    "expired_at",
    "updated_at",
]


@dataclass
class ActionResult:
    """How many rows an operator action changed, and why the others were skipped."""

    changed: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    rows: list[Notification] = field(default_factory=list)  # the rows changed (none with `on_chunk`)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


@dataclass(frozen=True)
class RowAction:
    """An operator action on rows: why it does not apply to a row (`refusal`, None when it
    does), what it changes on one in memory (`change`), and the fields that change."""

    name: str
    refusal: Callable[[Notification, datetime], str | None]
    change: Callable[[Notification, datetime], None]
    fields: tuple[str, ...]
    wakes: bool = False  # it may make rows due now: tell a waiting `runtick --loop`


# Rows per transaction of an operator action (and per DELETE of a purge): each chunk is
# re-read under lock, changed and saved in a short transaction of its own, so a select-all
# of 100,000 rows neither holds its locks (or, on SQLite, the database's write lock) for
# the whole run nor builds one UPDATE whose CASE grows with the selection (quadratic).
ACTION_BATCH = 500


OnChunk = Callable[[list[Notification]], None]


def act(
    action: RowAction, rows: Iterable[Notification], now: datetime | None = None, on_chunk: OnChunk | None = None
) -> ActionResult:
    """Apply `action` to `rows`; rows it does not apply to are skipped with a reason.

    In chunks of ACTION_BATCH rows (a digest's rows always in one: `digests.chunks`), each
    in a transaction of its own: the chunk is re-read (locked on PostgreSQL) and its
    changes saved with one bulk UPDATE, so a tick's claim or write-back in between is never
    overwritten, and the host site's writes and ticks get their turn between chunks.

    `on_chunk(changed)`, when given, is called with each chunk's changed rows inside that
    chunk's transaction (the admin logs them there), and the rows are not kept in
    `result.rows`: memory, and whatever the caller writes per row, then stay a chunk's
    worth however big the selection.
    """
    now = now or timezone.now()
    result = ActionResult()
    # In id order (one lock order for every caller: no deadlock between two), a digest's
    # rows in one chunk (no tick between chunks sends half of it).
    earliest: datetime | None = None
    locked_for = 0.0  # seconds the last chunk's transaction held its locks
    for number, chunk in enumerate(digests.chunks(_pks(rows), ACTION_BATCH)):
        if number:
            let_others_write(locked_for)
        began = time.monotonic()
        changed = _act_on_chunk(action, chunk, now, result, on_chunk)
        locked_for = time.monotonic() - began
        if action.wakes:
            due = min((r.next_fire_at for r in changed if r.next_fire_at), default=None)
            earliest = due if earliest is None or (due is not None and due < earliest) else earliest
    if earliest is not None:
        wake.announce_due(earliest)
    return result


def _act_on_chunk(
    action: RowAction, pks: list[Any], now: datetime, result: ActionResult, on_chunk: OnChunk | None
) -> list[Notification]:
    """One chunk of `act`, in one short transaction; returns the rows it changed."""
    changed: list[Notification] = []
    with transaction.atomic():
        query = Notification.objects.filter(pk__in=pks).order_by("pk")
        if connection.features.has_select_for_update:
            query = query.select_for_update()
        fresh, unloadable = load_defensively(query)
        for _ in unloadable:
            result.skip("cannot be loaded (a value the ORM cannot read): fix it in the database or purge it")
        for row in fresh:
            reason = action.refusal(row, now)
            if reason:
                result.skip(reason)
                continue
            action.change(row, now)
            row.updated_at = now
            changed.append(row)
        # The chunk is locked (PostgreSQL) or under the write lock (SQLite): every row is there.
        result.changed += update_rows(Notification, changed, list(dict.fromkeys([*action.fields, "updated_at"])))
        if address_keys.saves_keys(action.fields):  # an erasure's take_out, a requeue's errors
            address_keys.rewrite(changed)
        if on_chunk is not None:
            on_chunk(changed)
    if on_chunk is None:
        result.rows.extend(changed)
    for _ in range(len(pks) - len(fresh) - len(unloadable)):
        result.skip("no longer exists")
    return changed


def requeue(rows: Iterable[Notification], now: datetime | None = None, on_chunk: OnChunk | None = None) -> ActionResult:
    """Make dead letters and partial failures due now, with a clean retry count.

    A partial failure owes only the channels that failed, and only those are sent; a
    dead letter owes what its firing still owed. A recurring row stopped by a permanent
    failure (`next_fire_at` NULL) fires now and then resumes its schedule (the write-back
    of a firing moves it to its first occurrence after now). An expired firing kept as a
    dead letter is requeued like any dead letter, once its `expires_at` (if any) is ahead
    again. So is a failing row whose retries were lowered to what it had spent (no tick
    takes it again). Other rows are skipped with a reason: requeueing a healthy row would
    fire it early, and a retrying row retries by itself.
    Rows are re-read inside the transaction (locked on PostgreSQL) so a tick's claim or
    write-back in between is never overwritten (see `act`, and for `on_chunk` too).
    A row of a digest brings every row of its digest: the digest is sent again as one.
    """
    return act(REQUEUE, digests.with_their_digests(_pks(rows)), now, on_chunk)


def _requeue(row: Notification, now: datetime) -> None:
    if row.failed_channels is not None:
        row.pending_channels = row.resend_channels
    # A one-shot row keeps its firing id, so receivers de-duplicate the resend;
    # a recurring row's id already belongs to its next scheduled firing.
    if row.is_recurring:
        row.firing_id = uuid.uuid4()
    row.set_due(now)
    row.error_count = 0
    row.dead_lettered_at = None
    previous = row.last_error or row.previous_error
    row.note_error(None)
    row.previous_error = previous  # the admin shows "previous: ..." until a firing delivers


def _requeue_refusal(row: Notification, now: datetime) -> str | None:
    """Why `row` must not be requeued, or None when it may."""
    state = row.state(now)
    if state == State.PAUSED:
        return "paused: resume it first"
    if state == State.EXPIRED and row.dead_lettered_at is not None:
        state = State.DEAD  # an expired firing kept as a dead letter
    if state == State.RETRYING and not row.retries_used_up():
        return "still retrying on its own"
    if state not in (State.DEAD, State.PARTIAL, State.RETRYING):
        return "nothing failed (not a dead letter or partial failure)"
    if row.claimed_until is not None and row.claimed_until > now:
        return "being delivered by a tick right now"
    if state == State.PARTIAL and not row.resend_channels:
        return "the failed channels are no longer configured"
    if row.expires_at is not None and row.expires_at < now:
        return "past its expires_at (it would expire again): extend or clear expires_at first"
    return None


REQUEUE = RowAction("requeue", _requeue_refusal, _requeue, tuple(REQUEUE_FIELDS), wakes=True)


PURGE_BATCH = ACTION_BATCH  # rows per DELETE, each in its own short transaction


def purge(rows: Iterable[Notification], on_batch: Callable[[int, int], None] | None = None) -> int:
    """Delete rows in small batches; returns how many went. Their delivery history stays until it expires.

    Each batch locks its rows in primary-key order before deleting them, as every writer
    of several rows does (`store.statements.lock_in_order`): no deadlock with a tick's write-back.

    `on_batch(deleted, total)` is called after each batch: the progress of a big purge.
    """
    pks = _pks(rows)
    total = len(set(pks))
    deleted = 0
    locked_for = 0.0  # seconds the last chunk's transaction held its locks
    for number, chunk in enumerate(digests.chunks(pks, PURGE_BATCH)):  # a digest's rows go together
        if number:
            let_others_write(locked_for)
        began = time.monotonic()
        with transaction.atomic():
            lock_in_order(chunk)  # a DELETE locks in its scan's order: take them in the one order first
            _, per_model = Notification.objects.filter(pk__in=chunk).delete()
        deleted += per_model.get(Notification._meta.label, 0)
        locked_for = time.monotonic() - began
        if on_batch is not None:
            on_batch(deleted, total)
    return deleted


def _pks(rows: Iterable[Notification] | Iterable[Any]) -> list[Any]:
    """The ids of `rows`: a queryset, rows, or ids."""
    if isinstance(rows, QuerySet):
        return list(rows.order_by().values_list("pk", flat=True))
    return [getattr(row, "pk", row) for row in rows]
