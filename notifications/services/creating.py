"""Creating and editing rows: `schedule_notification`, `edit` and the due-time rule they share, `start`."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, OperationalError, connection, connections, transaction
from django.db.models import BooleanField, ExpressionWrapper
from django.utils import timezone

from notifications.channels import validation as channel_validation
from notifications.databases import DatabaseNow
from notifications.models import (
    USER_FIELDS,
    Notification,
    address_keys,
    attachment_files,
    attachments,
    fresh,
    states,
    validation,
)
from notifications.rules import schedule
from notifications.services import inserting, wake

NO_OCCURRENCE_LEFT = "The rule has no occurrence left after now."
# Why an edit of a stored row is refused: a firing of it is in flight, it changed since the
# edit began, or it is gone.
EDIT_IN_FLIGHT = (
    "This notification is being delivered by a tick right now. Its outcome is written back "
    "within a minute or so: reload the page then and edit it again."
)
EDIT_STALE = (
    "This notification changed since this page was loaded (a tick fired it, or someone else "
    "saved it). Reload the page to see it as it is now, and edit it again."
)
EDIT_GONE = "This notification no longer exists (delivered, cancelled or purged meanwhile)."

# Editing either moves a recurring row's schedule: it starts again under the new rule.
RULE_FIELDS = frozenset({"recurrence_rule", "timezone"})
# Editing any of these may put the due time inside quiet hours: it moves to the window's end.
QUIET_FIELDS = frozenset({"next_fire_at", "quiet_hours", "timezone"})
# Editing any of these may send the row to another target (`notifications.flow.targets`).
TARGET_FIELDS = frozenset({"channels", "webhook_url"})


def schedule_notification(
    *, fire_at: datetime | None = None, key: str = "", on_conflict: str = "error", **fields: Any
) -> Notification:
    """Validate and save a new row, or apply `on_conflict` to the row holding `key`; see
    `notifications.api.schedule`.

    Validated once, in Python (`prepare`); a plain row then costs one INSERT and nothing
    else (and on PostgreSQL the fast lane's NOTIFY after commit): the database enforces
    its own constraints, and a refusal is still a ValidationError naming the field.
    """
    check_policy(on_conflict)
    row, given = prepare(fire_at=fire_at, key=key, fields=fields)
    # Content goes to storage only once the rest of the row is known to be good.
    row.attachments = attachments.store(given) if given else []
    new_files = [item for item in row.attachments if not any(item is kept for kept in given)]
    try:
        check_stored(row, given)
        if row.key:
            saved = _save_keyed(row, on_conflict)
            kept = {item["file"] for item in attachments.stored(saved.attachments)}
            attachments.delete_files([f for f in new_files if f["file"] not in kept], at_once=True)  # "keep"
            return saved
        inserting.insert_one(row)
    except BaseException:
        attachments.delete_files(new_files, at_once=True)
        raise
    wake.announce_due(row.next_fire_at)
    return row


def check_stored(row: Notification, given: list[Any]) -> None:
    """Raise ValidationError on `attachments` if the list `store` made of `given` cannot be
    saved (a name no database stores): checked once they are stored, as a save would."""
    if given:
        errors = validation.stored_attachment_errors(row.attachments)
        if errors:
            raise ValidationError(errors)


def check_policy(on_conflict: str) -> None:
    """Raise ValueError unless `on_conflict` is one of `ON_CONFLICT`."""
    if on_conflict not in ON_CONFLICT:
        raise ValueError(f"on_conflict must be {' or '.join(map(repr, ON_CONFLICT))}, not {on_conflict!r}")


def prepare(
    *, fire_at: datetime | None = None, key: str = "", fields: dict[str, Any], now: datetime | None = None
) -> tuple[Notification, list[Any]]:
    """schedule()'s arguments as an unsaved row, validated and due: (row, attachments given).

    Every rule of the row runs once, in Python (`Notification.full_clean` without its
    constraint queries: the database decides those as it inserts). The attachments are
    checked but not stored yet. Raises ValidationError naming each bad field, TypeError
    for an argument schedule() does not take, ValueError for a naive `fire_at`.
    `fields` is not changed.
    """
    fields = dict(fields)
    if "next_fire_at" in fields:  # the column's own name works as well as fire_at
        if fire_at is not None:
            raise TypeError("schedule() takes fire_at or next_fire_at, not both")
        fire_at = fields.pop("next_fire_at")
    unknown = set(fields) - _SCHEDULE_FIELDS
    if unknown:
        raise TypeError(f"schedule() got unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    given = fields.pop("attachments", None) or []
    if isinstance(given, str | bytes) or not isinstance(given, list | tuple):
        raise ValidationError({"attachments": ["Give a list of attachments."]})
    row = fresh.new(key=key, **fields)  # as Notification(...), without its per-field work
    if fire_at is not None and timezone.is_naive(fire_at):
        raise ValueError("fire_at must be an aware datetime (USE_TZ is on)")
    # The key's uniqueness is the database's to decide (`_save_keyed`): a check here would race.
    # No unique field either (the pk is new): Django's validate_unique would find nothing to ask.
    with validation.batch():  # its rules share what they read (the payload's JSON is encoded once)
        row.full_clean(exclude=["next_fire_at"], validate_unique=False, validate_constraints=False)
    if given and not channel_validation.take_attachments(row.channel_list):
        raise ValidationError({"attachments": [channel_validation.attachments_refused()]})
    now = now or timezone.now()
    start(row, fire_at or now, fire_at=fire_at, now=now)
    return row, list(given)


# `key` and `on_conflict` are schedule()'s arguments of their own; `attachments` are stored
# by it (`notifications.models.attachments`), and `message` is QueuedEmailBackend's.
_SCHEDULE_FIELDS = {*USER_FIELDS, "attachments", "message"}

# What schedule(key=...) does when a row holds the key already: raise ValidationError on
# `key`, replace that row's fields (same pk, a fresh start), or return it unchanged.
ON_CONFLICT = ("error", "replace", "keep")
# A keyed schedule() tries again only when a row with its key appeared or vanished between
# its read and its write (a concurrent schedule() or cancel()), or a deadlock rolled it
# back. Each try is a statement or two; hosts that loop schedule() and cancel() on one key
# (measured: three schedulers beside a canceller) lose a few tries in a row now and then,
# and only a key that keeps changing hands for all of these gives up.
KEY_ATTEMPTS = 50
# What a replace keeps of the row it replaces: its identity and its history.
_KEPT_ON_REPLACE = frozenset({"id", "created_at", "last_fired_at"})


def _save_keyed(row: Notification, on_conflict: str) -> Notification:
    """Insert `row`, or apply `on_conflict` to the row that holds its key.

    Race-safe on every database through the key's unique constraint: a caller that loses
    the race to a concurrent schedule() is refused by the database and applies its policy
    to the winner's row. So concurrent calls with one key leave exactly one row. A row
    cancelled meanwhile (between the refusal and the look at the winner, or between the
    look and the replace) leaves the key free again: the call tries once more. A deadlock
    (MariaDB's duplicate-key locks beside a delete) is tried again too, unless the
    caller's transaction holds work of its own (the database rolled that back).

    With "error" the INSERT comes first (a taken key is the exception); with "replace" and
    "keep" the look does (a taken key is what they expect).
    """
    own_transaction = not connections[inserting.alias()].in_atomic_block
    for _ in range(KEY_ATTEMPTS):
        try:
            if on_conflict == "error":
                if _insert_keyed(row):
                    return row
                raise ValidationError({"key": [ValidationError(validation.KEY_TAKEN, code="unique")]})
            existing = Notification.objects.filter(key=row.key).order_by().first()
            if existing is None:
                if _insert_keyed(row):
                    return row
                continue  # another call inserted the key first: apply the policy to its row
            if on_conflict == "keep":
                return existing
            replaced = _replace_keyed(row)
            if replaced is not None:
                return replaced
            # cancelled between the read and the replace: insert after all
        except OperationalError as exc:
            if not (own_transaction and inserting.is_retryable(exc)):
                raise
    raise RuntimeError(f"schedule(key={row.key!r}): the key kept changing hands; try again")


def _insert_keyed(row: Notification) -> bool:
    """Insert `row`; False when the key's constraint refused it (a row with its key exists).

    Inside the caller's transaction in a savepoint, so a refusal leaves it usable. The
    refusal itself says it was the key (`inserting.is_key_violation`): no look afterwards,
    which a cancel could answer "no row" to. Validated by schedule(): inserted as it is
    (Notification.save() would validate again, and its check of the key would race the
    constraint that decides).
    """
    try:
        with inserting.savepoint_if_needed():
            inserting.insert_many([row])
    except IntegrityError as exc:
        if not inserting.is_key_violation(exc):
            raise inserting.constraint_error(exc) from exc
        row.pk = None  # not saved: a later attempt inserts it afresh
        row._state.adding = True
        return False
    wake.announce_due(row.next_fire_at)
    return True


def _replace_keyed(row: Notification, *, announce: bool = True) -> Notification | None:
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
        old_files = attachment_files(Notification.objects.filter(key=row.key))
        if not Notification.objects.filter(key=row.key).update(**values):
            return None
        replaced = Notification.objects.get(key=row.key)
        address_keys.rewrite([replaced])  # every column was replaced, the addresses too
        kept = {item["file"] for item in attachments.stored(replaced.attachments)}
        attachments.delete_files([item for item in old_files if item["file"] not in kept])  # on commit
    if announce:  # schedule_many() wakes the fast lane once for its whole batch
        wake.announce_due(replaced.next_fire_at)
    return replaced


def start(
    row: Notification, start_at: datetime, *, fire_at: datetime | None = None, now: datetime | None = None
) -> None:
    """The due-time rule, in memory: `row`'s schedule starts at `start_at`.

    `next_fire_at` = `fire_at`, or without one the first due time: `start_at` for a
    one-shot row, the rule's first occurrence after it for a recurring one. `starts_at`
    (an RRULE's DTSTART: its time of day, phase and COUNT count from it) = `start_at`,
    or the first due time when the rule picks it: the first firing sent, never the
    moment of scheduling (but at a DST gap's end, `schedule.first_occurrence`).
    Raises ValidationError on `recurrence_rule` when the rule has no occurrence left. A
    due time inside the row's quiet hours moves to the window's end (at `now`).
    """
    row.starts_at = start_at
    if fire_at is None and row.is_recurring:
        # `start_at` is not sent: the rule counts its COUNT from its first due time instead.
        first = schedule.first_occurrence(row.recurrence_rule, row.timezone, start_at)
        if first is None:  # COUNT or UNTIL already spent: the row would never fire
            raise ValidationError({"recurrence_rule": [NO_OCCURRENCE_LEFT]})
        fire_at, row.starts_at = first
    row.next_fire_at = fire_at or start_at
    row.leave_quiet_hours(now or timezone.now())


def edit(
    row: Notification,
    fields: Iterable[str],
    *,
    changed: Iterable[str] | None = None,
    now: datetime | None = None,
    dry_run: bool = False,
    version: datetime | None = None,
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

    An existing row is fenced (`_lock_for_edit`): the edit is refused with a ValidationError
    while a firing of the row is in flight, whose write-back would delete or advance the row
    over it, and when the row's `updated_at` is no longer `version` (the edit began from an
    older copy); the row stays locked until the caller's transaction ends. A claim whose
    lease ran out (a tick stalled past it) is released with the edit, so that tick's late
    write-back does not delete or overwrite it.

    `dry_run=True` edits a copy and saves nothing: a form learns what the edit would
    raise, and the edit itself, given the same `now`, then does exactly that.
    """
    now = now or timezone.now()
    if dry_run:
        row = copy.copy(row)
    with transaction.atomic():  # a stored row stays locked from its check to its save
        lapsed = not row._state.adding and _lock_for_edit(row, version)
        return _edit(row, fields, changed, now, dry_run, lapsed)


def _edit(
    row: Notification,
    fields: Iterable[str],
    changed: Iterable[str] | None,
    now: datetime,
    dry_run: bool,
    lapsed: bool = False,
) -> list[str]:
    """`edit` once the stored row is known to take it; `lapsed`: it holds a claim whose lease ran out."""
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
    if QUIET_FIELDS & edited and row.leave_quiet_hours(now) and "next_fire_at" not in written:
        written.append("next_fire_at")
    if "next_fire_at" in written:  # a due time set afresh: a waiting firing is due then
        row.firing_due_at = None
        written.append("firing_due_at")
    if row.held_for is not None and ("next_fire_at" in written or TARGET_FIELDS & edited):
        # Held for the old due time or target: the next tick decides afresh (an open circuit
        # holds it again), and closing that circuit no longer moves the due time set here.
        row.held_for = None
        written.append("held_for")
    if lapsed:
        # A tick stalled past its lease still holds the token, and its late write-back would
        # delete or overwrite the edit: release the claim, as `replace` does, so that
        # write-back finds nothing (it is fenced by the token).
        row.claim_token = row.claimed_until = None
        written += ["claim_token", "claimed_until"]
    if not dry_run:
        row.save(update_fields=[*written, "updated_at"])
        wake.announce_due(row.next_fire_at)
    return written


def _lock_for_edit(row: Notification, version: datetime | None) -> bool:
    """Lock the stored `row` (PostgreSQL, MariaDB/MySQL; SQLite's write transaction does the
    same) and raise ValidationError if an edit of it must not be saved (see `edit`). Returns
    whether it holds a claim whose lease ran out.

    A tick's write-back is fenced by its claim, not by what an operator saved meanwhile: a
    one-shot row edited while its firing is in flight would be deleted by that firing's
    success. A claim cannot begin while the row is locked, so the admin, which validates
    and saves in one transaction, saves what it checked.
    """
    rows = Notification.objects.filter(pk=row.pk)
    if connection.features.has_select_for_update:
        rows = rows.select_for_update()  # held to the end of the caller's transaction
    live = ExpressionWrapper(states.claim_live(lease_clock=DatabaseNow()), output_field=BooleanField())
    stored = rows.annotate(live=live).values_list("live", "updated_at", "claimed_until").first()
    if stored is None:
        raise ValidationError(EDIT_GONE, code="gone")
    in_flight, updated_at, claimed_until = stored
    if in_flight:
        raise ValidationError(EDIT_IN_FLIGHT, code="in_flight")
    if version is not None and updated_at != version:
        raise ValidationError(EDIT_STALE, code="stale")
    return claimed_until is not None  # and not live: its lease ran out


# What an edit may write: the fields host code sets and the due time, never the queue's own.
_EDITABLE_FIELDS = frozenset(f.name for f in Notification._meta.concrete_fields if f.editable)
