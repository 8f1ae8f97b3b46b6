"""One firing, in memory: what became of a claimed row (`record_firing` & co., holds,
expiry, `defer`, `release`), as an `Outcome` that `persisting.save_outcomes` writes."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from notifications import mailers
from notifications.channels import ChannelResult, ErrorClass
from notifications.conf import Policy, TickSettings
from notifications.models import Notification, validation
from notifications.models.addresses import normalise
from notifications.rules import expiry, quiet, retry
from notifications.rules.secrets import site_secret_problem
from notifications.services.outcomes import Kind, Outcome

logger = logging.getLogger("notifications")


def record_firing(row: Notification, results: list[ChannelResult], now: datetime, policy: Policy) -> Outcome:
    """Apply the channels' results to `row` and say what became of it.

    All ok advances the row, some ok parks it as partial (never retried as a whole),
    none ok retries it after the backoff or dead-letters it once retries run out.
    """
    _owe_recipients(row, results)
    failed = [r for r in results if not r.ok]
    if not failed:
        return _advance(row, now, Kind.SUCCEEDED, failed=None, results=results)
    if len(failed) < len(results):
        return _advance(row, now, Kind.PARTIAL, failed=[r.channel for r in failed], results=results)
    error = "; ".join(r.error or r.channel for r in failed)
    if all(r.not_sent for r in results):  # nothing went out, nothing failed: its turn comes
        return defer(row, now, now, error)
    if all(r.error_class == ErrorClass.PERMANENT for r in failed):
        # No retry can help (blocked address, 410 Gone, recipient refused ...), nor can the
        # next occurrence: a recurring row stops too, until an operator requeues it.
        return _dead_letter(row, now, error, policy, results=results, skip_forward=False)
    retry_after = max((r.retry_after for r in failed if r.retry_after is not None), default=None)
    return _fail(row, now, error, policy, results=results, retry_after=retry_after)


def _owe_recipients(row: Notification, results: list[ChannelResult]) -> None:
    """Recipients a server deferred while it took the message for others are what this
    firing (its id) still owes on email; an email send that went to everyone owes none."""
    email = next((r for r in results if r.channel == "email"), None)
    if email is None:
        return
    if email.deferred:
        owed = sorted({normalise(a) for a in email.deferred})
        row.pending_recipients = {"firing": str(row.firing_id), "addresses": owed}
    elif email.ok:
        row.pending_recipients = None


def record_internal_error(row: Notification, exc: BaseException, now: datetime, policy: Policy) -> Outcome:
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


def record_invalid(row: Notification, errors: dict[str, list[str]], now: datetime, policy: Policy) -> Outcome:
    """A row that bypassed validation cannot be delivered: dead-letter it with the reason."""
    return _dead_letter(row, now, validation.describe(errors), policy, skip_forward=False)


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
    elif kind == Kind.SUCCEEDED:
        return Outcome(row, kind, delete=True, results=results)
    else:
        row.set_due(None)  # parked: a partial one-shot is never retried as a whole
        next_at = None
    if kind == Kind.SUCCEEDED and row.is_recurring and next_at is None:
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
        return _dead_letter(row, now, error, policy, results=results)
    retry_at = now + timedelta(seconds=decision.delay)
    late = row.too_late(retry_at)
    if late is not None:  # the retry could not be sent anyway: the firing expires now
        return _expire(row, now, f"the next retry would come {late}; {error}", results=results)
    row.error_count = decision.error_count
    row.wait_until(retry_at)
    row.note_error(error)
    row.release_claim(now)
    return Outcome(row, Kind.RETRIED, detail=f"retry in {decision.delay:g}s: {error}", results=results or [])


def _dead_letter(
    row: Notification,
    now: datetime,
    error: str,
    policy: Policy,
    *,
    results: list[ChannelResult] | None = None,
    skip_forward: bool = True,
) -> Outcome:
    """Dead-letter the firing; a recurring row's schedule skips forward past now."""
    policy = policy.for_row(row.max_retries, row.backoff)
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


@dataclass(frozen=True)
class Hold:
    """Why a claimed row is not sent now: too late (`EXPIRED`, with `reason`), inside
    quiet hours, or waiting for a signing secret (`DEFERRED` until `until`)."""

    kind: Kind
    reason: str = ""
    until: datetime | None = None
    new_due_time: bool = False  # quiet hours: `until` is the firing's due time from now on


# A row whose webhook needs the site's signing secret while the site has no usable one is
# held this long at a time: no retry spent, no attempt logged. Every tick reads the
# settings afresh, so the first tick after the fix sends it.
CONFIGURATION_HOLD = timedelta(seconds=60)  # one cron interval


def unsigned_webhook(row: Notification, problem: str | None, *, own_secret: bool | None = None) -> bool:
    """Whether `row` owes a webhook signed with the site's secret while `problem` (from
    `secrets.site_secret_problem`) says the site has none it can sign with. `own_secret`
    says whether the row has a secret of its own, for a row read without it."""
    if problem is None or (bool(row.webhook_secret) if own_secret is None else own_secret):
        return False
    return "webhook" in row.owed_channels


def held_back(row: Notification, now: datetime, settings: TickSettings) -> Hold | None:
    """Whether `row`, claimed and valid, must not be sent at `now`, and why. Changes nothing.

    Too late (past `expires_at`, or more than `max_delay` after the firing was due, however
    long it waited since: retries, an open circuit, a rate limit) expires the firing;
    inside quiet hours defers it to the window's end, unless that end is past `expires_at`
    too. A webhook the site cannot sign (NOTIFICATIONS_WEBHOOK_SECRET empty or
    malformed: a configuration error, notifications.E010/E021), and email that would go
    through the queue itself or an alias that names no mailer (E022), are held for
    CONFIGURATION_HOLD instead of spending the row's retries. `settings` is the tick's.
    """
    late = row.too_late(now)
    if late is not None:
        return Hold(Kind.EXPIRED, reason=late)
    end = quiet.end_of_window(quiet.effective(row.quiet_hours, settings.quiet_hours), row.timezone, now)
    if end is None:
        problem = site_secret_problem(settings.webhook_secrets)
        if unsigned_webhook(row, problem):
            return Hold(Kind.DEFERRED, reason=f"held: {problem}", until=now + CONFIGURATION_HOLD)
        if "email" in row.owed_channels:
            trouble = mailers.problem(row.mailer or "")  # the queue itself, or an alias gone (E022)
            if trouble is not None:
                return Hold(Kind.DEFERRED, reason=f"held: {trouble}", until=now + CONFIGURATION_HOLD)
        return None
    past = expiry.past_deadline(end, row.expires_at)
    if past is not None:
        return Hold(Kind.EXPIRED, reason=f"quiet hours end {expiry.describe(past)} past expires_at")
    return Hold(Kind.DEFERRED, until=end, new_due_time=True)


def record_held(row: Notification, hold: Hold, now: datetime) -> Outcome:
    """Apply a `Hold` to `row`: nothing was sent, no retry is spent."""
    if hold.kind == Kind.DEFERRED and hold.until is not None:
        if hold.new_due_time:
            row.set_due(hold.until)
        else:  # held for a setting: the firing waits, still due when it was
            row.wait_until(hold.until)
        row.release_claim(now)
        detail = hold.reason or f"quiet hours until {hold.until:%Y-%m-%d %H:%M} UTC"
        return Outcome(row, Kind.DEFERRED, detail=detail)
    return _expire(row, now, hold.reason)


def defer(row: Notification, until: datetime, now: datetime, detail: str, *, held_for: str | None = None) -> Outcome:
    """Not sent now, due again at `until`: no retry spent, no attempt logged. Flow control
    (`notifications.flow`): an open circuit (`held_for` its target) or a rate limit."""
    row.wait_until(until)
    row.held_for = held_for
    row.release_claim(now)
    return Outcome(row, Kind.DEFERRED, detail=detail)


def _expire(row: Notification, now: datetime, reason: str, *, results: list[ChannelResult] | None = None) -> Outcome:
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


def dead_letter_unloadable(token: uuid.UUID, unloadable: dict[Any, str], now: datetime, policy: Policy) -> int:
    """Dead-letter claimed rows the ORM could not load, by id, without reading them.

    Such a row reached the table some other way (raw SQL) holding a value no code can
    convert; it is parked (`next_fire_at` NULL, so a recurring one stops too) for an
    operator, with the conversion error in `last_error`. Fenced by the claim token.
    """
    dead = 0
    for pk, error in unloadable.items():
        logger.error("notification %s: cannot be loaded (%s); dead-lettered", pk, error)
        dead += Notification.objects.filter(pk=pk, claim_token=token).update(
            dead_lettered_at=now,
            next_fire_at=None,
            error_count=policy.max_retries,
            last_error=f"invalid: cannot load the row: {error}",
            previous_error=None,
            failed_channels=None,
            claim_token=None,
            claimed_until=None,
            updated_at=now,
        )
    return dead


def release_held(key: str, now: datetime) -> int:
    """Make the rows held for target `key` due now (its circuit closed; one UPDATE over the
    held index)."""
    return Notification.objects.filter(held_for=key).update(next_fire_at=now, held_for=None, updated_at=now)


def release(row: Notification, now: datetime) -> Outcome:
    """Hand an unattempted row back: due again at once for the next tick."""
    row.release_claim(now)
    return Outcome(row, Kind.RELEASED)
