"""Every change of queue state, in one place: the tick, the API and the admin use it.

- Creating and editing: `schedule_notification` (the API's `schedule()`; with a `key`,
  `_save_keyed` lets the key's unique constraint settle races) and `edit` (the admin's
  add and change pages) share one due-time rule, `start`.
- Transitions of one firing (`record_firing`, `record_invalid`, `record_internal_error`)
  work on a row in memory and say what should happen to it; `save_outcomes` then writes
  a whole batch at once, fenced by the claim token so a tick that lost its claim writes
  nothing. `last_error` and `failed_channels` are set together, by `_note_error`.
- Operator actions: `purge` and `cancel`, and the `RowAction`s `REQUEUE`, `RUN_NOW`,
  `PAUSE` and `RESUME`, which `act` applies to rows re-read under lock (the admin's
  actions and buttons) and `requeue`, `run_now`, `pause`, `resume` to one row or key
  (the API). `refusal` says why one does not apply to a row.

What each state means is `notifications.states`; the claim itself is `notifications.claims`.
"""

from __future__ import annotations

import copy
import logging
import os
import socket
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import DateTimeField, Field, Model, QuerySet, UUIDField
from django.utils import timezone

from . import compat, expiry, quiet, retry, schedule, validation, wake
from .channels import ChannelResult, ErrorClass
from .claims import load_defensively
from .conf import Policy, TickSettings, quiet_hours
from .models import USER_FIELDS, DeliveryAttempt, Notification, Suppression, TickRun
from .secrets import site_secret_problem
from .states import State, partial_error


class Kind(StrEnum):
    """What a firing came to. Counted in the tick's summary line."""

    SUCCEEDED = "succeeded"
    PARTIAL = "partial"
    RETRIED = "retried"
    DEAD_LETTERED = "dead_lettered"
    EXPIRED = "expired"  # not sent: too late (`expires_at`, `max_delay`)
    DEFERRED = "deferred"  # not sent yet: quiet hours, an open circuit or a rate limit
    RELEASED = "released"  # not attempted (the tick was stopping): claim handed back


# The counts of the tick's summary line and of its `TickRun` record, in the line's order.
TICK_COUNTS = ("claimed", *(kind.value for kind in Kind))


@dataclass
class Outcome:
    """One row's result in a tick: what happened, and whether the row goes away."""

    row: Notification
    kind: Kind
    delete: bool = False
    detail: str = ""
    results: list[ChannelResult] = field(default_factory=list)


logger = logging.getLogger("notifications")

# Fields a write-back may change; one bulk UPDATE sets them all.
WRITE_BACK_FIELDS = [
    "next_fire_at",
    "last_fired_at",
    "error_count",
    "last_error",
    "previous_error",
    "dead_lettered_at",
    "expired_at",
    "firing_id",
    "pending_channels",
    "failed_channels",
    "claim_token",
    "claimed_until",
    "held_for",
    "updated_at",
]

# A deferred row's write-back: the due time moves, the claim goes, nothing else changes
# (`held_for` names the open circuit holding it, if one does).
DEFER_FIELDS = ["next_fire_at", "claim_token", "claimed_until", "held_for", "updated_at"]

REQUEUE_FIELDS = [
    "pending_channels",
    "failed_channels",
    "firing_id",
    "next_fire_at",
    "error_count",
    "dead_lettered_at",
    "last_error",
    "previous_error",
    "expired_at",
    "updated_at",
]


# --- creating and editing -----------------------------------------------------------

NO_OCCURRENCE_LEFT = "The rule has no occurrence left after now."

# Editing either moves a recurring row's schedule: it starts again under the new rule.
RULE_FIELDS = frozenset({"recurrence_rule", "timezone"})
# Editing any of these may put the due time inside quiet hours: it moves to the window's end.
QUIET_FIELDS = frozenset({"next_fire_at", "quiet_hours", "timezone"})


def schedule_notification(
    *, fire_at: datetime | None = None, key: str = "", on_conflict: str = "error", **fields: Any
) -> Notification:
    """Validate and save a new row, or apply `on_conflict` to the row holding `key`; see
    `notifications.api.schedule`."""
    if on_conflict not in ON_CONFLICT:
        raise ValueError(f"on_conflict must be {' or '.join(map(repr, ON_CONFLICT))}, not {on_conflict!r}")
    if "next_fire_at" in fields:  # the column's own name works as well as fire_at
        if fire_at is not None:
            raise TypeError("schedule() takes fire_at or next_fire_at, not both")
        fire_at = fields.pop("next_fire_at")
    unknown = set(fields) - _SCHEDULE_FIELDS
    if unknown:
        raise TypeError(f"schedule() got unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    row = Notification(key=key, **fields)
    if fire_at is not None and timezone.is_naive(fire_at):
        raise ValueError("fire_at must be an aware datetime (USE_TZ is on)")
    # The key's uniqueness is the database's to decide (`_save_keyed`): a check here would race.
    row.full_clean(exclude=["next_fire_at"], validate_constraints=False)
    start(row, fire_at or timezone.now(), fire_at=fire_at)
    if row.key:
        return _save_keyed(row, on_conflict)
    row.save()
    wake.announce_due(row.next_fire_at)
    return row


# `key` and `on_conflict` are schedule()'s arguments of their own.
_SCHEDULE_FIELDS = set(USER_FIELDS)

# What schedule(key=...) does when a row holds the key already: raise ValidationError on
# `key`, replace that row's fields (same pk, a fresh start), or return it unchanged.
ON_CONFLICT = ("error", "replace", "keep")
# A keyed schedule() tries again only when a row with its key appeared or vanished between
# its read and its write (a concurrent schedule() or cancel()); more than a few in a row
# means something keeps deleting and creating the key.
KEY_ATTEMPTS = 5
# What a replace keeps of the row it replaces: its identity and its history.
_KEPT_ON_REPLACE = frozenset({"id", "created_at", "last_fired_at"})


def _save_keyed(row: Notification, on_conflict: str) -> Notification:
    """Insert `row`, or apply `on_conflict` to the row that holds its key.

    Race-safe on every database through the key's unique constraint: the insert runs in
    a savepoint, and a caller that loses the race to a concurrent schedule() is refused
    by the database, reads the winner and applies its policy to that row. So concurrent
    calls with one key leave exactly one row.
    """
    for _ in range(KEY_ATTEMPTS):
        existing = Notification.objects.filter(key=row.key).order_by().first()
        if existing is None:
            if _insert_keyed(row):
                return row
            continue  # another call inserted the key first: apply the policy to its row
        if on_conflict == "error":
            raise ValidationError({"key": [ValidationError(validation.KEY_TAKEN, code="unique")]})
        if on_conflict == "keep":
            return existing
        replaced = _replace_keyed(row)
        if replaced is not None:
            return replaced
        # cancelled between the read and the replace: insert after all
    raise RuntimeError(f"schedule(key={row.key!r}): the key kept changing hands; try again")


def _insert_keyed(row: Notification) -> bool:
    """Insert `row`; False when a row with its key exists by now (the constraint refused it)."""
    try:
        with transaction.atomic():  # a savepoint: a lost race leaves a caller's transaction usable
            # Validated by schedule(); Notification.save() would validate again, and its
            # check of the key would race the constraint that decides.
            Model.save(row, force_insert=True)
    except IntegrityError:
        if not Notification.objects.filter(key=row.key).exists():
            raise  # not the key's constraint
        return False
    wake.announce_due(row.next_fire_at)
    return True


def _replace_keyed(row: Notification) -> Notification | None:
    """Give the row holding `row.key` every field of `row`: a fresh start. None if no row holds it.

    One UPDATE by key, so concurrent replaces queue on the row (its lock on PostgreSQL,
    the write lock on SQLite) and the last one wins whole. The row starts afresh: no
    errors, not paused, a new firing (a new `webhook-id`) due at `row`'s due time, and
    its claim released, so a firing in flight writes nothing back over it (the
    write-back is fenced by the claim token).
    """
    values = {f.attname: getattr(row, f.attname) for f in Notification._meta.concrete_fields}
    for name in _KEPT_ON_REPLACE:
        values.pop(name)
    values.update(updated_at=timezone.now(), claim_token=None, claimed_until=None)
    with transaction.atomic():
        if not Notification.objects.filter(key=row.key).update(**values):
            return None
        replaced = Notification.objects.get(key=row.key)
    wake.announce_due(replaced.next_fire_at)
    return replaced


def start(
    row: Notification, start_at: datetime, *, fire_at: datetime | None = None, now: datetime | None = None
) -> None:
    """The due-time rule, in memory: `row`'s schedule starts at `start_at`.

    `starts_at` = `start_at`: an RRULE's time of day, phase and COUNT count from it.
    `next_fire_at` = `fire_at`, or without one the first due time: `start_at` for a
    one-shot row, the rule's first occurrence after it for a recurring one. Raises
    ValidationError on `recurrence_rule` when the rule has no occurrence left. A due time
    inside the row's quiet hours moves to the window's end (`quiet_start`, at `now`).
    """
    row.starts_at = start_at
    if fire_at is None:
        fire_at = _next_occurrence(row, start_at) if row.is_recurring else start_at
        if fire_at is None:  # COUNT or UNTIL already spent: the row would never fire
            raise ValidationError({"recurrence_rule": [NO_OCCURRENCE_LEFT]})
    row.next_fire_at = fire_at
    quiet_start(row, now or timezone.now())


def quiet_start(row: Notification, now: datetime) -> bool:
    """A due time inside the row's quiet hours moves to the window's end; True if it moved.

    The save path's half of the rule (the tick defers what it finds due inside a window):
    a row due in the past is sent at `now`, so `now` is what counts then.
    """
    if row.next_fire_at is None:
        return False
    window = quiet.effective(row.quiet_hours, quiet_hours())
    try:
        end = quiet.end_of_window(window, row.timezone, max(row.next_fire_at, now))
    except ValueError:  # a bad window or zone: validation names it, on this same save
        return False
    if end is None:
        return False
    row.next_fire_at = end
    return True


def edit(
    row: Notification,
    fields: Iterable[str],
    *,
    changed: Iterable[str] | None = None,
    now: datetime | None = None,
    dry_run: bool = False,
) -> list[str]:
    """An operator's edit of `row` (the admin's add and change pages); returns the fields set.

    `fields` are the fields the edit writes, their new values already on `row`; `changed`
    those among them that differ from the stored row (default: all of them).

    A new row starts like `schedule()`: at its due time, or now (a one-shot row is then due
    now, a recurring one at its rule's next occurrence). When an existing recurring row's
    rule or time zone changes, its schedule starts again: from its due time if that was
    edited too, else from now, due at the new rule's next occurrence. `starts_at` moves
    with `next_fire_at`, so the occurrence preview and every firing after the next follow
    the new rule. A row made one-shot keeps its due time.

    A due time the edit puts inside the row's quiet hours (a new due time, quiet hours or
    time zone) moves to the window's end.

    A new row is saved whole; an existing one only in the fields edited (and those the
    rule moved): the tick's bookkeeping (claim, retry count, errors) may have moved since
    the page was loaded and is never written back stale. Raises ValidationError on
    `recurrence_rule` when the new rule has no occurrence left.

    `dry_run=True` edits a copy and saves nothing: a form learns what the edit would
    raise, and the edit itself, given the same `now`, then does exactly that.
    """
    now = now or timezone.now()
    if dry_run:
        row = copy.copy(row)
    if row._state.adding:
        start(row, row.next_fire_at or now, fire_at=row.next_fire_at, now=now)
        if not dry_run:
            row.save()
            wake.announce_due(row.next_fire_at)
        return [f.name for f in Notification._meta.concrete_fields]  # saved whole
    written = [name for name in dict.fromkeys(fields) if name in _EDITABLE_FIELDS]
    edited = set(written) if changed is None else set(changed) & set(written)
    if RULE_FIELDS & edited and row.is_recurring:
        if "next_fire_at" in edited:  # a due time set by hand: the new rule counts from it
            row.starts_at = row.next_fire_at or now
        else:
            start(row, now, now=now)
        written += [name for name in ("next_fire_at", "starts_at") if name not in written]
    if QUIET_FIELDS & edited and quiet_start(row, now) and "next_fire_at" not in written:
        written.append("next_fire_at")
    if not dry_run:
        row.save(update_fields=[*written, "updated_at"])
        wake.announce_due(row.next_fire_at)
    return written


# What an edit may write: the fields host code sets and the due time, never the queue's own.
_EDITABLE_FIELDS = frozenset(f.name for f in Notification._meta.concrete_fields if f.editable)


# --- one firing, in memory -----------------------------------------------------------


def _next_occurrence(row: Notification, now: datetime) -> datetime | None:
    return schedule.next_occurrence(row.recurrence_rule, row.timezone, now, anchor=row.recurrence_anchor or now)


def _release_claim(row: Notification, now: datetime) -> None:
    row.claim_token = None
    row.claimed_until = None
    row.updated_at = now


def _note_error(
    row: Notification, error: str | None, *, failed: list[str] | None = None, expired: datetime | None = None
) -> None:
    """Set `last_error`, `failed_channels` and `expired_at`, which always move together:
    `failed` names the channels of a partial failure (`last_error` then reads
    `partial: ...`), `expired` is when a firing came too late (it reads `expired: ...`).
    A firing's outcome also ends the `previous_error` a requeue kept."""
    row.last_error = partial_error(failed) if failed else error
    row.failed_channels = failed or None
    row.expired_at = expired
    row.previous_error = None


def record_firing(row: Notification, results: list[ChannelResult], now: datetime, policy: Policy) -> Outcome:
    """Apply the channels' results to `row` and say what became of it.

    All ok advances the row, some ok parks it as partial (never retried as a whole),
    none ok retries it after the backoff or dead-letters it once retries run out.
    """
    failed = [r for r in results if not r.ok]
    if not failed:
        return _advance(row, now, Kind.SUCCEEDED, failed=None, results=results)
    if len(failed) < len(results):
        return _advance(row, now, Kind.PARTIAL, failed=[r.channel for r in failed], results=results)
    error = "; ".join(r.error or r.channel for r in failed)
    if all(r.error_class == ErrorClass.PERMANENT for r in failed):
        # No retry can help (blocked address, 410 Gone, recipient refused ...), nor can the
        # next occurrence: a recurring row stops too, until an operator requeues it.
        return _dead_letter(row, now, error, policy, results=results, skip_forward=False)
    retry_after = max((r.retry_after for r in failed if r.retry_after is not None), default=None)
    return _fail(row, now, error, policy, results=results, retry_after=retry_after)


def record_internal_error(row: Notification, exc: BaseException, now: datetime, policy: Policy) -> Outcome:
    """An unexpected exception is a full failure of the row, so poison walks to the dead letters."""
    return _fail(row, now, f"internal: {type(exc).__name__}: {exc}"[:500], policy)


def record_invalid(row: Notification, errors: dict[str, list[str]], now: datetime, policy: Policy) -> Outcome:
    """A row that bypassed validation cannot be delivered: dead-letter it with the reason."""
    return _dead_letter(row, now, validation.describe(errors), policy, skip_forward=False)


def _advance(
    row: Notification, now: datetime, kind: Kind, *, failed: list[str] | None, results: list[ChannelResult]
) -> Outcome:
    """After a firing that delivered something: next occurrence, or done."""
    if row.is_recurring:
        next_at = _next_occurrence(row, now)  # may raise: handled as an internal error
        row.next_fire_at = next_at
        row.error_count = 0
        row.firing_id = uuid.uuid4()  # the next firing is a new message
        # A firing went out: an earlier dead-lettered firing no longer makes the row a
        # dead letter (requeueing it would only fire the schedule early). The delivery
        # log keeps that history.
        row.dead_lettered_at = None
    elif kind == Kind.SUCCEEDED:
        return Outcome(row, kind, delete=True, results=results)
    else:
        row.next_fire_at = None  # parked: a partial one-shot is never retried as a whole
        next_at = None
    if kind == Kind.SUCCEEDED and row.is_recurring and next_at is None:
        return Outcome(row, kind, delete=True, detail="schedule finished", results=results)
    _note_error(row, None, failed=failed)
    row.last_fired_at = now
    row.pending_channels = None
    _release_claim(row, now)
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
    late = expiry.past_deadline(retry_at, row.expires_at)
    if late is not None:  # the retry could not be sent anyway: the firing expires now
        reason = f"the next retry would come {expiry.describe(late)} past expires_at; {error}"
        return _expire(row, now, reason, results=results)
    row.error_count = decision.error_count
    row.next_fire_at = retry_at
    _note_error(row, error)
    _release_claim(row, now)
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
    _note_error(row, error)
    next_at = None
    if skip_forward and row.is_recurring:
        try:
            next_at = _next_occurrence(row, now)
        except Exception:  # noqa: BLE001 - a schedule that cannot advance parks the row
            next_at = None
    if next_at is not None:
        row.error_count = 0
        row.next_fire_at = next_at
        row.firing_id = uuid.uuid4()
        row.pending_channels = None  # the next firing owes every channel
    else:
        # pending_channels stays: a requeue resends only what this firing still owed.
        row.error_count = policy.max_retries
        row.next_fire_at = None
    _release_claim(row, now)
    return Outcome(row, Kind.DEAD_LETTERED, detail=error, results=results or [])


@dataclass(frozen=True)
class Hold:
    """Why a claimed row is not sent now: too late (`EXPIRED`, with `reason`), inside
    quiet hours, or waiting for a signing secret (`DEFERRED` until `until`)."""

    kind: Kind
    reason: str = ""
    until: datetime | None = None


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

    Too late (past `expires_at`, or more than `max_delay` after `next_fire_at`) expires the
    firing; inside quiet hours defers it to the window's end, unless that end is past
    `expires_at` too. A webhook the site cannot sign (NOTIFICATIONS_WEBHOOK_SECRET empty or
    malformed: a configuration error, notifications.E010/E021) is held for
    CONFIGURATION_HOLD instead of spending the row's retries. `settings` is the tick's.
    """
    late = expiry.too_late(now, due_at=row.next_fire_at, expires_at=row.expires_at, max_delay=row.max_delay)
    if late is not None:
        return Hold(Kind.EXPIRED, reason=late)
    end = quiet.end_of_window(quiet.effective(row.quiet_hours, settings.quiet_hours), row.timezone, now)
    if end is None:
        problem = site_secret_problem(settings.webhook_secrets)
        if unsigned_webhook(row, problem):
            return Hold(Kind.DEFERRED, reason=f"held: {problem}", until=now + CONFIGURATION_HOLD)
        return None
    past = expiry.past_deadline(end, row.expires_at)
    if past is not None:
        return Hold(Kind.EXPIRED, reason=f"quiet hours end {expiry.describe(past)} past expires_at")
    return Hold(Kind.DEFERRED, until=end)


def record_held(row: Notification, hold: Hold, now: datetime) -> Outcome:
    """Apply a `Hold` to `row`: nothing was sent, no retry is spent."""
    if hold.kind == Kind.DEFERRED and hold.until is not None:
        row.next_fire_at = hold.until
        _release_claim(row, now)
        detail = hold.reason or f"quiet hours until {hold.until:%Y-%m-%d %H:%M} UTC"
        return Outcome(row, Kind.DEFERRED, detail=detail)
    return _expire(row, now, hold.reason)


def defer(row: Notification, until: datetime, now: datetime, detail: str, *, held_for: str | None = None) -> Outcome:
    """Not sent now, due again at `until`: no retry spent, no attempt logged. Flow control
    (`notifications.flow`): an open circuit (`held_for` its target) or a rate limit."""
    row.next_fire_at = until
    row.held_for = held_for
    _release_claim(row, now)
    return Outcome(row, Kind.DEFERRED, detail=detail)


def _expire(row: Notification, now: datetime, reason: str, *, results: list[ChannelResult] | None = None) -> Outcome:
    """The firing came too late and is not sent: `last_error` says why, `expired_at` when.

    A recurring row moves on to its first occurrence after now, a new firing; a one-shot
    row, or a recurring one with no occurrence left before `expires_at`, is kept as a dead
    letter (`next_fire_at` NULL). No retry is spent: `error_count` is left as it was.
    """
    _note_error(row, expiry.PREFIX + reason, expired=now)
    next_at = None
    if row.is_recurring:
        try:
            next_at = _next_occurrence(row, now)
        except Exception:  # noqa: BLE001 - a schedule that cannot advance parks the row
            next_at = None
        if next_at is not None and expiry.past_deadline(next_at, row.expires_at) is not None:
            next_at = None  # every later firing would expire too
    if next_at is not None:
        row.error_count = 0
        row.next_fire_at = next_at
        row.firing_id = uuid.uuid4()
        row.pending_channels = None
    else:
        row.next_fire_at = None
        row.dead_lettered_at = now
    _release_claim(row, now)
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


def release(row: Notification, now: datetime) -> Outcome:
    """Hand an unattempted row back: due again at once for the next tick."""
    _release_claim(row, now)
    return Outcome(row, Kind.RELEASED)


# --- persisting a batch ---------------------------------------------------------------


def save_outcomes(batches: Iterable[tuple[uuid.UUID, Iterable[Outcome]]], attempts: Sequence[DeliveryAttempt]) -> None:
    """Write batches back in one short transaction: one DELETE, one bulk UPDATE, one
    UPDATE for released rows and the INSERT of the delivery log.

    Fenced by the batches' claim tokens: rows whose claim expired and passed to another
    tick are left alone. On SQLite the transaction holds the database's write lock,
    which the host site's writes wait for: the delivery log's statements are prepared
    before it begins.
    """
    tokens: list[uuid.UUID] = []
    outcomes: list[Outcome] = []
    for token, batch in batches:
        tokens.append(token)
        outcomes.extend(batch)
    doomed = [o.row.pk for o in outcomes if o.delete]
    released = [o.row.pk for o in outcomes if o.kind == Kind.RELEASED]
    deferred = [o.row for o in outcomes if o.kind == Kind.DEFERRED]
    kept = [o.row for o in outcomes if not o.delete and o.kind not in (Kind.RELEASED, Kind.DEFERRED)]
    log = insert_statements(DeliveryAttempt, attempts)
    refused = [refusal for o in outcomes for result in o.results for refusal in result.refused]
    claimed = Notification.objects.filter(claim_token__in=tokens)
    with transaction.atomic():
        if doomed:
            claimed.filter(pk__in=doomed).delete()
        if kept:
            claimed.bulk_update(kept, WRITE_BACK_FIELDS)
        if deferred:
            claimed.bulk_update(deferred, DEFER_FIELDS)
        if released:
            claimed.filter(pk__in=released).update(claim_token=None, claimed_until=None)
        if log:
            with connection.cursor() as cursor:
                for sql, params in log:
                    cursor.execute(sql, params)
        if refused:  # addresses refused for good, whatever became of the claim
            suppress(refused)


def suppress(refusals: Iterable[tuple[str, str]], now: datetime | None = None) -> None:
    """Add (address, reason) pairs to the suppression list; an address already there keeps
    its entry. The tick's write-back and django-anymail's tracking signal call this."""
    entries: dict[str, Suppression] = {}
    for address, reason in refusals:
        key = address.strip().lower()
        if key and key not in entries:
            entries[key] = Suppression(address=key, reason=reason[:200], created_at=now or timezone.now())
    if entries:
        Suppression.objects.bulk_create(entries.values(), ignore_conflicts=True)


def insert_statements(model: type[Model], objs: Sequence[Model]) -> list[tuple[str, list[Any]]]:
    """Multi-row INSERTs of `objs`: bulk_create's result without its per-row SQL compiling.

    The delivery log gets a row per channel per firing; at thousands of rows a second,
    compiling bulk_create's multi-row VALUES dominated the write-back. One statement per
    chunk rather than an executemany: on SQLite the write lock is held across the
    statements, and each executemany row is a step that waits for Python's GIL again.
    Values go through each field's own database preparation, so every backend stores
    them as bulk_create would. For models without save() logic: no signals, no pre_save.
    """
    fields = [f for f in compat.concrete_fields(model) if not f.primary_key]
    prepare = [_preparer(f) for f in fields]
    per_statement = compat.rows_per_statement(connection, fields, objs)  # the backend's parameter limit
    placeholders = "({})".format(", ".join(["%s"] * len(fields)))
    statements = []
    for start in range(0, len(objs), per_statement):
        chunk = objs[start : start + per_statement]
        # Only quoted model metadata goes into the text; values are parameters.
        sql = "INSERT INTO {} ({}) VALUES {}".format(  # noqa: S608
            compat.quote_name(connection, model._meta.db_table),
            ", ".join(compat.quote_name(connection, f.column) for f in fields),
            ", ".join([placeholders] * len(chunk)),
        )
        statements.append(
            (sql, [p(getattr(obj, f.attname)) for obj in chunk for f, p in zip(fields, prepare, strict=True)])
        )
    return statements


def _preparer(field: Field[Any, Any]) -> Callable[[Any], Any]:
    """The cheapest correct conversion of one field's Python value for the database."""
    if field.get_internal_type() in _PLAIN_TYPES:
        return lambda value: value
    if field.is_relation and compat.relation_target(field).get_internal_type() in ("AutoField", "BigAutoField"):
        return lambda value: value if type(value) is int else field.get_db_prep_save(value, connection)
    if isinstance(field, UUIDField) and not compat.stores_uuid_natively(connection):
        return lambda value: value.hex if isinstance(value, uuid.UUID) else field.get_db_prep_save(value, connection)
    if isinstance(field, DateTimeField):
        adapt = compat.datetime_adapter(connection)
        return lambda value: None if value is None else adapt(value)
    return lambda value: field.get_db_prep_save(value, connection)


# Field types whose Python values (str, int, None) the database drivers take as they are.
_PLAIN_TYPES = {
    "CharField",
    "TextField",
    "IntegerField",
    "BigIntegerField",
    "SmallIntegerField",
    "PositiveIntegerField",
    "PositiveSmallIntegerField",
    "PositiveBigIntegerField",
}


def announce(outcomes: Iterable[Outcome]) -> None:
    """Send the public signals for a batch that has been written back."""
    from . import signals

    by_kind = {
        Kind.SUCCEEDED: signals.notification_delivered,
        Kind.PARTIAL: signals.notification_partially_delivered,
        Kind.DEAD_LETTERED: signals.notification_dead_lettered,
        Kind.EXPIRED: signals.notification_expired,
    }
    for outcome in outcomes:
        signal = by_kind.get(outcome.kind)
        if signal is None or not signal.has_listeners(Notification):
            continue
        for receiver, response in signal.send_robust(Notification, notification=outcome.row, results=outcome.results):
            if isinstance(response, Exception):
                logger.error("signal receiver %r failed: %r", receiver, response)


# --- housekeeping -----------------------------------------------------------------------

PRUNE_BATCH = 1000


def prune_history(now: datetime, retention_days: float, batch: int = PRUNE_BATCH) -> int:
    """Delete at most `batch` delivery records (and tick records) past retention."""
    cutoff = now - timedelta(days=retention_days)
    old = DeliveryAttempt.objects.filter(attempted_at__lt=cutoff).order_by("attempted_at").values("pk")[:batch]
    deleted, _ = DeliveryAttempt.objects.filter(pk__in=old).delete()
    old_runs = TickRun.objects.filter(finished_at__lt=cutoff).order_by("finished_at").values("pk")[:batch]
    TickRun.objects.filter(pk__in=old_runs).delete()
    return deleted


def record_tick(
    started_at: datetime,
    finished_at: datetime,
    batches: int,
    counts: dict[str, int],
    clock_offset: float | None = None,
) -> TickRun:
    return TickRun.objects.create(
        started_at=started_at,
        finished_at=finished_at,
        host=socket.gethostname()[:255],
        pid=os.getpid(),
        batches=batches,
        clock_offset=clock_offset,
        **counts,
    )


# --- operator actions -----------------------------------------------------------------


@dataclass
class ActionResult:
    """How many rows an operator action changed, and why the others were skipped."""

    changed: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    rows: list[Notification] = field(default_factory=list)  # the rows changed

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


def requeue(rows: Iterable[Notification], now: datetime | None = None) -> ActionResult:
    """Make dead letters and partial failures due now, with a clean retry count.

    A partial failure owes only the channels that failed, and only those are sent; a
    dead letter owes what its firing still owed. A recurring row stopped by a permanent
    failure (`next_fire_at` NULL) fires now and then resumes its schedule (the write-back
    of a firing moves it to its first occurrence after now). An expired firing kept as a
    dead letter is requeued like any dead letter, once its `expires_at` (if any) is ahead
    again. Other rows are skipped with a reason:
    requeueing a healthy row would fire it early, and a retrying row retries by itself.
    Rows are re-read inside the transaction (locked on PostgreSQL) so a tick's claim or
    write-back in between is never overwritten (see `act`).
    """
    return act(REQUEUE, rows, now)


def _requeue(row: Notification, now: datetime) -> None:
    if row.failed_channels is not None:
        row.pending_channels = row.resend_channels
    # A one-shot row keeps its firing id, so receivers de-duplicate the resend;
    # a recurring row's id already belongs to its next scheduled firing.
    if row.is_recurring:
        row.firing_id = uuid.uuid4()
    row.next_fire_at = now
    row.error_count = 0
    row.dead_lettered_at = None
    previous = row.last_error or row.previous_error
    _note_error(row, None)
    row.previous_error = previous  # the admin shows "previous: ..." until a firing delivers


def _requeue_refusal(row: Notification, now: datetime) -> str | None:
    """Why `row` must not be requeued, or None when it may."""
    state = row.state(now)
    if state == State.PAUSED:
        return "paused: resume it first"
    if state == State.EXPIRED and row.dead_lettered_at is not None:
        state = State.DEAD  # an expired firing kept as a dead letter
    if state == State.RETRYING:
        return "still retrying on its own"
    if state not in (State.DEAD, State.PARTIAL):
        return "nothing failed (not a dead letter or partial failure)"
    if row.claimed_until is not None and row.claimed_until > now:
        return "being delivered by a tick right now"
    if state == State.PARTIAL and not row.resend_channels:
        return "the failed channels are no longer configured"
    if row.expires_at is not None and row.expires_at < now:
        return "past its expires_at (it would expire again): extend or clear expires_at first"
    return None


PURGE_BATCH = 500  # rows per DELETE: keeps each statement's parameter list small


def purge(rows: Iterable[Notification]) -> int:
    """Delete rows in small batches; returns how many went. Their delivery history stays until it expires."""
    pks = _pks(rows)
    deleted = 0
    for start in range(0, len(pks), PURGE_BATCH):
        with transaction.atomic():
            _, per_model = Notification.objects.filter(pk__in=pks[start : start + PURGE_BATCH]).delete()
        deleted += per_model.get(Notification._meta.label, 0)
    return deleted


def _pks(rows: Iterable[Notification]) -> list[Any]:
    if isinstance(rows, QuerySet):
        return list(rows.order_by().values_list("pk", flat=True))
    return [row.pk for row in rows]


# --- lifecycle: cancel, pause, resume, run now ---------------------------------------------


@dataclass(frozen=True)
class RowAction:
    """An operator action on rows: why it does not apply to a row (`refusal`, None when it
    does), what it changes on one in memory (`change`), and the fields that change."""

    name: str
    refusal: Callable[[Notification, datetime], str | None]
    change: Callable[[Notification, datetime], None]
    fields: tuple[str, ...]
    wakes: bool = False  # it may make rows due now: tell a waiting `runtick --loop`


def act(action: RowAction, rows: Iterable[Notification], now: datetime | None = None) -> ActionResult:
    """Apply `action` to `rows`; rows it does not apply to are skipped with a reason.

    Rows are re-read inside the transaction (locked on PostgreSQL) and the changes saved
    with one bulk UPDATE, so a tick's claim or write-back in between is never overwritten.
    """
    now = now or timezone.now()
    result = ActionResult()
    pks = _pks(rows)
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
            result.rows.append(row)
        if result.rows:
            result.changed = Notification.objects.filter(pk__in=[r.pk for r in result.rows]).bulk_update(
                result.rows, list(dict.fromkeys([*action.fields, "updated_at"]))
            )
            if action.wakes:
                wake.announce_due(min((r.next_fire_at for r in result.rows if r.next_fire_at), default=None))
    for _ in range(len(set(pks)) - len(fresh) - len(unloadable)):
        result.skip("no longer exists")
    return result


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


def _resume_refusal(row: Notification, now: datetime) -> str | None:
    return None if row.paused_at is not None else "not paused"


def _resume(row: Notification, now: datetime) -> None:
    """Unpause: a one-shot row is due at its due time, or now if that passed; a recurring
    row skips what it missed, to its first occurrence after now (a new firing)."""
    row.paused_at = None
    if row.next_fire_at is None or _in_flight(row, now):
        return  # nothing scheduled (parked, a dead letter), or the firing in flight sets it
    if not row.is_recurring:
        row.next_fire_at = max(row.next_fire_at, now)
        return
    try:
        next_at = _next_occurrence(row, now)
    except Exception:  # noqa: BLE001 - a rule that cannot be read: the tick dead-letters it, saying why
        next_at = now
    if next_at != row.next_fire_at:  # the firing it waited for is skipped, a retry of it too
        if row.error_count and row.failed_channels is None and row.dead_lettered_at is None:
            row.last_error = None  # that retry's error: the row is clean again
        row.error_count = 0
        row.firing_id = uuid.uuid4()
        row.pending_channels = None
    row.next_fire_at = next_at  # None: the rule has nothing left, the row is parked


def _run_now_refusal(row: Notification, now: datetime) -> str | None:
    state = row.state(now)
    if state == State.PAUSED:
        return "paused: resume it first"
    if state in (State.DEAD, State.PARTIAL) or row.dead_lettered_at is not None:
        return "a dead letter or partial failure: requeue it instead"
    if _in_flight(row, now):
        return BEING_DELIVERED
    if state == State.DUE:
        return "already due"
    return None


def _run_now(row: Notification, now: datetime) -> None:
    # The current firing goes now; a recurring row's write-back then moves it to its next
    # occurrence after now, so its schedule continues.
    row.next_fire_at = now


PAUSE = RowAction("pause", _pause_refusal, _pause, ("paused_at",))
RESUME = RowAction(
    "resume",
    _resume_refusal,
    _resume,
    ("paused_at", "next_fire_at", "error_count", "last_error", "firing_id", "pending_channels"),
    wakes=True,
)
RUN_NOW = RowAction("run_now", _run_now_refusal, _run_now, ("next_fire_at",), wakes=True)
REQUEUE = RowAction("requeue", _requeue_refusal, _requeue, tuple(REQUEUE_FIELDS), wakes=True)


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
        query = Notification.objects.filter(key=key_or_row)
    else:
        raise TypeError(f"cancel() takes a key or a Notification, not {type(key_or_row).__name__}")
    return purge(query) > 0


def pause(key_or_row: str | Notification, now: datetime | None = None) -> Notification:
    """Pause the row: it is not claimed until resumed. Returns it as it now stands.

    Already paused, or not going to fire (parked, a dead letter): left as it is. A firing
    in flight finishes and writes back; nothing fires after it.
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


def pk_of(key_or_row: str | Notification) -> Any:
    """The id of the row `key_or_row` names; Notification.DoesNotExist for an unknown key."""
    if isinstance(key_or_row, Notification):
        return key_or_row.pk
    if not isinstance(key_or_row, str):
        raise TypeError(f"expected a key or a Notification, not {type(key_or_row).__name__}")
    pk = Notification.objects.filter(key=key_or_row).values_list("pk", flat=True).first() if key_or_row else None
    if pk is None:
        raise Notification.DoesNotExist(f"No notification has the key {key_or_row!r}.")
    return pk
