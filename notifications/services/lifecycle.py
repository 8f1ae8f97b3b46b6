"""A row's lifecycle: `cancel`, `pause`, `resume`, `run_now` (one row or key) and their
`RowAction`s, and `refusal`, what the admin's buttons show."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError

from notifications.models import Notification, validation
from notifications.models.states import State
from notifications.services import digests
from notifications.services.actions import REQUEUE, RowAction, act, purge

BEING_DELIVERED = "being delivered by a tick right now"


def _in_flight(row: Notification, now: datetime) -> bool:
    return row.claimed_until is not None and row.claimed_until > now


def _pause_refusal(row: Notification, now: datetime) -> str | None:
    if row.paused_at is not None:
        return "already paused"
    if row.next_fire_at is None:
        return "not going to fire (parked or a dead letter): nothing to pause"
    return None


def _pause(row: Notification, now: datetime) -> None:
    # The claim stays: a firing in flight finishes and writes back; nothing fires after it.
    row.paused_at = now
    if not _in_flight(row, now):
        digests.leave(row)  # its digest goes out without it; resumed, it joins a new one


def _resume_refusal(row: Notification, now: datetime) -> str | None:
    return None if row.paused_at is not None else "not paused"


def _resume(row: Notification, now: datetime) -> None:
    """Unpause: a one-shot row is due at its due time, or now if that passed; a recurring
    row skips what it missed, to its first occurrence after now (a new firing)."""
    row.paused_at = None
    if row.next_fire_at is None or _in_flight(row, now):
        return  # nothing scheduled (parked, a dead letter), or the firing in flight sets it
    digests.leave(row)  # still in a digest: paused while its digest was in flight
    if not row.is_recurring:
        row.set_due(max(row.next_fire_at, now))
        return
    try:
        next_at = row.next_occurrence(now)
    except Exception:  # noqa: BLE001 - a rule that cannot be read: the tick dead-letters it, saying why
        next_at = now
    if next_at != row.next_fire_at:  # the firing it waited for is skipped, a retry of it too
        if row.error_count and row.failed_channels is None and row.dead_lettered_at is None:
            row.last_error = None  # that retry's error: the row is clean again
        row.error_count = 0
        row.firing_id = uuid.uuid4()
        row.pending_channels = None
    row.set_due(next_at)  # None: the rule has nothing left, the row is parked


def _run_now_refusal(row: Notification, now: datetime) -> str | None:
    state = row.state(now)
    if state == State.PAUSED:
        return "paused: resume it first"
    if state in (State.DEAD, State.PARTIAL) or row.dead_lettered_at is not None:
        return "a dead letter or partial failure: requeue it instead"
    if state == State.RETRYING and row.retries_used_up():
        return "its retries are used up (the limit was lowered): requeue it instead"
    if _in_flight(row, now):
        return BEING_DELIVERED
    if state == State.DUE:
        return "already due"
    return None


def _run_now(row: Notification, now: datetime) -> None:
    # The current firing goes now; a recurring row's write-back then moves it to its next
    # occurrence after now, so its schedule continues.
    row.set_due(now)


PAUSE = RowAction("pause", _pause_refusal, _pause, ("paused_at", *digests.LEAVE_FIELDS))
RESUME = RowAction(
    "resume",
    _resume_refusal,
    _resume,
    ("paused_at", *digests.LEAVE_FIELDS),
    wakes=True,
)
RUN_NOW = RowAction("run_now", _run_now_refusal, _run_now, ("next_fire_at", "firing_due_at"), wakes=True)


def refusal(action: str, row: Notification, now: datetime) -> str | None:
    """Why the operator action `action` (`requeue`, `run_now`, `pause`, `resume`, `purge`)
    does not apply to `row` at `now`, or None when it does: what the admin's buttons show."""
    if action == "purge":
        return None
    return {a.name: a for a in (REQUEUE, PAUSE, RESUME, RUN_NOW)}[action].refusal(row, now)


def cancel(key_or_row: str | Notification) -> bool:
    """Delete the row (by key, or the row itself); False if there was none.

    A firing in flight writes nothing back: its write-back is fenced by the claim token,
    and the row it was for is gone.
    """
    if isinstance(key_or_row, Notification):
        query = Notification.objects.filter(pk=key_or_row.pk)
    elif isinstance(key_or_row, str):
        if not key_or_row:
            return False  # a blank key names no row
        _check_key(key_or_row)
        query = Notification.objects.filter(key=key_or_row)
    else:
        raise TypeError(f"cancel() takes a key or a Notification, not {type(key_or_row).__name__}")
    return purge(query) > 0


def pause(key_or_row: str | Notification, now: datetime | None = None) -> Notification:
    """Pause the row: it is not claimed until resumed. Returns it as it now stands.

    Already paused, or not going to fire (parked, a dead letter): left as it is. A firing
    in flight finishes and writes back; nothing fires after it. A row of a digest leaves
    it (`digests.leave`): the digest goes out without it, and once resumed the row joins
    its group's open digest, or opens one.
    """
    return _act_on_one(PAUSE, key_or_row, now)


def resume(key_or_row: str | Notification, now: datetime | None = None) -> Notification:
    """Unpause the row. Returns it as it now stands.

    A one-shot row is due at its due time, at once if that has passed. A recurring row
    moves to its rule's first occurrence after now: missed occurrences are not sent. A
    row that is not paused is left as it is.
    """
    return _act_on_one(RESUME, key_or_row, now)


def run_now(key_or_row: str | Notification, now: datetime | None = None) -> Notification:
    """Make the row due now; a recurring row then continues its schedule. Returns it as it
    now stands.

    Left as it is: a paused row (resume it first), a dead letter or partial failure
    (requeue it), a row already due, or one a tick is delivering right now.
    """
    return _act_on_one(RUN_NOW, key_or_row, now)


def _act_on_one(action: RowAction, key_or_row: str | Notification, now: datetime | None) -> Notification:
    pk = pk_of(key_or_row)
    result = act(action, Notification.objects.filter(pk=pk), now)
    if result.rows:
        return result.rows[0]
    return Notification.objects.get(pk=pk)  # left as it was; DoesNotExist if it went meanwhile


def _check_key(key: str) -> None:
    """A key no row can hold (a NUL, an unpaired surrogate) is a ValidationError on `key`,
    not a database error from the lookup."""
    messages = validation.text_errors(key)
    if messages:
        raise ValidationError({"key": messages})


def pk_of(key_or_row: str | Notification) -> Any:
    """The id of the row `key_or_row` names; Notification.DoesNotExist for an unknown key."""
    if isinstance(key_or_row, Notification):
        return key_or_row.pk
    if not isinstance(key_or_row, str):
        raise TypeError(f"expected a key or a Notification, not {type(key_or_row).__name__}")
    _check_key(key_or_row)
    pk = Notification.objects.filter(key=key_or_row).values_list("pk", flat=True).first() if key_or_row else None
    if pk is None:
        raise Notification.DoesNotExist(f"No notification has the key {key_or_row!r}.")
    return pk
