"""Settling one firing, in memory: what a claimed row's channel results (or a reason not
to send it) come to, applied to the row (`settle_firing` & co., `defer`, `release`,
`expire`, `dead_letter`), as an `Outcome` that the write-back
(`notifications.store.writeback.save_outcomes`) stores. No query: the worker threads
call it (`notifications.tick.workers`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Container
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from notifications.channels import ChannelResult, ErrorClass
from notifications.outcomes.escalation import escalates, wait_as_escalation
from notifications.outcomes.kinds import Kind, Outcome
from notifications.rules import expiry, retry

if TYPE_CHECKING:
    from notifications.conf import Policy
    from notifications.models import Notification

logger = logging.getLogger("notifications")


def settle_firing(
    row: Notification, results: list[ChannelResult], now: datetime, policy: Policy, tracking: Container[str] = ()
) -> Outcome:
    """Apply the channels' results to `row` and say what became of it (`tracking`: the
    channels that track each recipient, `Channel.tracks_recipients`).

    All ok advances the row, some ok parks it as partial (never retried as a whole; a row
    that escalates waits as its escalation instead, its failure in the delivery log),
    none ok retries it after the backoff or dead-letters it once retries run out. A row
    routed `first` needs one: the channel that delivered makes the firing a full success.
    """
    _owe_recipients(row, results, tracking)
    failed = [r for r in results if not r.ok]
    if row.routing == "first" and len(failed) < len(results):
        return _advance(row, now, Kind.SUCCEEDED, failed=None, results=results)
    if not failed:
        return _advance(row, now, Kind.SUCCEEDED, failed=None, results=results)
    error = "; ".join(r.error or r.channel for r in failed)
    if all(r.not_sent for r in failed):  # these were not tried, nothing failed: their turn comes
        if len(failed) < len(results):
            row.pending_channels = [r.channel for r in failed]  # the rest of this firing went out
        return defer(row, now, now, error)
    if len(failed) < len(results):
        if escalates(row):
            # The inbox message is out: its escalation must go out at the deadline, not wait
            # for an operator's requeue of the rest (the failure is in the delivery log).
            row.note_error(error)
            return wait_as_escalation(row, now, Kind.PARTIAL, f"failed: {','.join(r.channel for r in failed)}", results)
        return _advance(row, now, Kind.PARTIAL, failed=[r.channel for r in failed], results=results)
    if all(r.error_class == ErrorClass.PERMANENT for r in failed):
        # No retry can help (blocked address, 410 Gone, recipient refused ...), nor can the
        # next occurrence: a recurring row stops too, until an operator requeues it.
        return dead_letter(row, now, error, policy, results=results, skip_forward=False)
    retry_after = max((r.retry_after for r in failed if r.retry_after is not None), default=None)
    return _fail(row, now, error, policy, results=results, retry_after=retry_after)


def settle_skipped(row: Notification, now: datetime) -> Outcome:
    """Every channel of the firing was skipped (the recipient turned its category off, or
    a throttle): nothing was sent and nothing failed, so it settles like a success: a
    one-shot row goes, a recurring one moves to its next occurrence. No retry is spent."""
    row.pending_recipients = None
    return _advance(row, now, Kind.SKIPPED, failed=None, results=[])


def _owe_recipients(row: Notification, results: list[ChannelResult], tracking: Container[str]) -> None:
    """Recipients a server deferred while it took the message for others are what this
    firing (its id) still owes on that channel (email's); a send that went to everyone owes none."""
    tracked = next((r for r in results if r.channel in tracking), None)
    if tracked is None:
        return
    if tracked.deferred:
        row.owe_recipients(tracked.deferred)
    elif tracked.ok:
        row.pending_recipients = None


def settle_internal_error(row: Notification, exc: BaseException, now: datetime, policy: Policy) -> Outcome:
    """An unexpected exception is a full failure of the row, so poison walks to the dead letters.

    Never raises: the tick waits for every claimed row's outcome, so one that cannot even
    be given a retry (a `backoff` step past the calendar) is dead-lettered at once.
    """
    error = f"internal: {type(exc).__name__}: {exc}"[:500]
    try:
        return _fail(row, now, error, policy)
    except Exception as second:  # logged; the row must still get an outcome
        logger.exception("notification %s: no retry could be scheduled; dead-lettered", row.pk)
        row.dead_lettered_at = now
        row.note_error(f"{error}; no retry could be scheduled: {type(second).__name__}: {second}"[:500])
        row.set_due(None)
        row.error_count = policy.max_retries
        row.release_claim(now)
        return Outcome(row, Kind.DEAD_LETTERED, detail=row.last_error or error)


def _advance(
    row: Notification, now: datetime, kind: Kind, *, failed: list[str] | None, results: list[ChannelResult]
) -> Outcome:
    """After a firing that delivered something: next occurrence, or done."""
    if row.is_recurring:
        next_at = row.next_occurrence(now)  # may raise: handled as an internal error
        row.set_due(next_at)
        row.error_count = 0
        row.firing_id = uuid.uuid4()  # the next firing is a new message
        # A firing went out: an earlier dead-lettered firing no longer makes the row a
        # dead letter (requeueing it would only fire the schedule early). The delivery
        # log keeps that history.
        row.dead_lettered_at = None
    elif kind in (Kind.SUCCEEDED, Kind.SKIPPED) and escalates(row):
        row.note_error(None)
        return wait_as_escalation(row, now, kind, "", results)
    elif kind in (Kind.SUCCEEDED, Kind.SKIPPED):
        return Outcome(row, kind, delete=True, results=results)
    else:
        row.set_due(None)  # parked: a partial one-shot is never retried as a whole
        next_at = None
    if kind in (Kind.SUCCEEDED, Kind.SKIPPED) and row.is_recurring and next_at is None:
        return Outcome(row, kind, delete=True, detail="schedule finished", results=results)
    row.note_error(None, failed=failed)
    row.last_fired_at = now
    row.pending_channels = None
    row.release_claim(now)
    return Outcome(row, kind, detail=f"failed: {','.join(failed)}" if failed else "", results=results)


def _fail(
    row: Notification,
    now: datetime,
    error: str,
    policy: Policy,
    *,
    results: list[ChannelResult] | None = None,
    retry_after: float | None = None,
) -> Outcome:
    policy = policy.for_row(row.max_retries, row.backoff)
    decision = retry.after_failure(row.error_count, policy.max_retries, policy.backoff, retry_after=retry_after)
    if isinstance(decision, retry.DeadLetter):
        return dead_letter(row, now, error, policy, results=results)
    retry_at = now + timedelta(seconds=decision.delay)
    late = row.too_late(retry_at)
    if late is not None:  # the retry could not be sent anyway: the firing expires now
        return expire(row, now, f"the next retry would come {late}; {error}", results=results)
    row.error_count = decision.error_count
    row.wait_until(retry_at)
    row.note_error(error)
    row.release_claim(now)
    return Outcome(row, Kind.RETRIED, detail=f"retry in {decision.delay:g}s: {error}", results=results or [])


def dead_letter(
    row: Notification,
    now: datetime,
    error: str,
    policy: Policy,
    *,
    results: list[ChannelResult] | None = None,
    skip_forward: bool = True,
    escalate: bool = True,
) -> Outcome:
    """Dead-letter the firing; a recurring row's schedule skips forward past now, and a row
    that escalates (`escalate`: unless it is invalid) waits as its escalation."""
    policy = policy.for_row(row.max_retries, row.backoff)
    if escalate and escalates(row):  # the inbox left no message: the escalation goes out at the deadline
        row.note_error(error)
        return wait_as_escalation(row, now, Kind.DEAD_LETTERED, error, results or [])
    row.dead_lettered_at = now
    row.note_error(error)
    next_at = None
    if skip_forward and row.is_recurring:
        try:
            next_at = row.next_occurrence(now)
        except Exception:  # noqa: BLE001 - a schedule that cannot advance parks the row
            next_at = None
    row.set_due(next_at)
    if next_at is not None:
        row.error_count = 0
        row.firing_id = uuid.uuid4()
        row.pending_channels = None  # the next firing owes every channel
    else:
        # pending_channels stays: a requeue resends only what this firing still owed.
        row.error_count = policy.max_retries
    row.release_claim(now)
    return Outcome(row, Kind.DEAD_LETTERED, detail=error, results=results or [])


def defer(row: Notification, until: datetime, now: datetime, detail: str, *, held_for: str | None = None) -> Outcome:
    """Not sent now, due again at `until`: no retry spent, no attempt logged. Flow control
    (`notifications.flow`): an open circuit (`held_for` its target) or a rate limit."""
    row.wait_until(until)
    row.held_for = held_for
    row.release_claim(now)
    return Outcome(row, Kind.DEFERRED, detail=detail)


def expire(row: Notification, now: datetime, reason: str, *, results: list[ChannelResult] | None = None) -> Outcome:
    """The firing came too late and is not sent: `last_error` says why, `expired_at` when.

    A recurring row moves on to its first occurrence after now, a new firing; a one-shot
    row, or a recurring one with no occurrence left before `expires_at`, is kept as a dead
    letter (`next_fire_at` NULL). No retry is spent: `error_count` is left as it was.
    """
    row.note_error(expiry.PREFIX + reason, expired=now)
    next_at = None
    if row.is_recurring:
        try:
            next_at = row.next_occurrence(now)
        except Exception:  # noqa: BLE001 - a schedule that cannot advance parks the row
            next_at = None
        if next_at is not None and expiry.past_deadline(next_at, row.expires_at) is not None:
            next_at = None  # every later firing would expire too
    row.set_due(next_at)
    if next_at is not None:
        row.error_count = 0
        row.firing_id = uuid.uuid4()
        row.pending_channels = None
    else:
        row.dead_lettered_at = now
    row.release_claim(now)
    return Outcome(row, Kind.EXPIRED, detail=reason, results=results or [])


def release(row: Notification, now: datetime) -> Outcome:
    """Hand an unattempted row back: due again at once for the next tick."""
    row.release_claim(now)
    return Outcome(row, Kind.RELEASED)
