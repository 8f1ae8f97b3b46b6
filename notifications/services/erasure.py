"""Erasing a person: their rows (with their attachments), their address out of the rows they
share with others, delivery records, preferences and throttle windows, and on request their
suppression entry.

A person is named by `recipient` (the host's id), by `address` (an email address), or
both. Their rows (their `recipient`, or sent to nobody else) go through `purge`, as a
cancel does: a firing in flight when they go writes nothing back over them (its write-back
is fenced by its claim token, and the rows are gone). A row they share with others keeps
going to the others: their address is taken out of it (`take_out`), the row re-read under
lock (`actions.act`); a firing of it in flight is taken back (`states.TAKEN_BACK`), so
its write-back writes nothing, not even a delivery record naming them.

A person's rows are found by the index of who each row names (`models.address_keys`): an
index lookup, however many rows the queue holds. `plan` decides which rows go and which
change; `describe` (the dry run) counts it, and `erase` does it and counts the same things
under the same names.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q

from notifications.models import (
    DeliveryAttempt,
    InboxMessage,
    Notification,
    Preference,
    Suppression,
    SuppressionLift,
    ThrottleWindow,
    address_keys,
    validation,
)
from notifications.models.addresses import (
    as_list,
    bare,
    mentions,
    names,
    normalise,
    redact,
    spellings,
    storable,
    without,
)
from notifications.services.actions import ActionResult, RowAction, act, purge
from notifications.store.claims import load_defensively

SCAN_CHUNK = 2000  # rows read at a time of those the index says name the person

# Where a row sends to: an address of the person's there makes the row theirs alone when
# nobody else is left.
RECIPIENT_FIELDS = ("email_to", "email_cc", "email_bcc")
ADDRESS_FIELDS = (*RECIPIENT_FIELDS, "reply_to")
# What may name the person in a row someone else still receives, all taken out.
TAKEN_OUT_FIELDS = (
    *ADDRESS_FIELDS,
    "from_email",
    "headers",
    "pending_recipients",
    "last_error",
    "previous_error",
    "claim_token",  # a firing in flight is taken back
)
NOBODY_LEFT = "nobody else is left to send it to: deleted whole"
NOTHING_OF_THEIRS = "it no longer names them"


@dataclass(frozen=True)
class Person:
    """Who is erased: the keys their preferences may be stored under, and their address."""

    recipient: str
    address: str  # normalised (`addresses.bare`); blank: none

    @property
    def keys(self) -> list[str]:
        return [k for k in dict.fromkeys((self.recipient, self.address)) if k]


@dataclass(frozen=True)
class Plan:
    """The rows an erasure deletes whole (`whole`) and those it takes the person out of (`changed`)."""

    whole: list[Any]
    changed: list[Any]


def person(recipient: str = "", address: str = "") -> Person:
    """Validate what names the person; ValidationError naming the field."""
    if not isinstance(recipient, str) or not isinstance(address, str):
        raise ValidationError({"recipient": ["Give the recipient and the address as strings."]})
    recipient = recipient.strip()
    key = bare(address) if address.strip() else ""
    if not recipient and not key:
        raise ValidationError({"recipient": ["Give a recipient, an address, or both."]})
    if address.strip() and "@" not in key:
        raise ValidationError({"address": ["Give an email address."]})
    return Person(recipient, key)


def plan(who: Person) -> Plan:
    """Which rows are the person's: those for their `recipient` (or stored under their
    address as the recipient) go whole; those naming their address (To, Cc, Bcc, Reply-To,
    From, a header, an error) go whole when nobody else is left to send them to, and are
    otherwise changed. Found by the index of who each row names (`address_keys`): only the
    rows that name them are read."""
    whole: set[Any] = set()
    named: list[Any] = []
    found = sorted({row["notification_id"] for row in address_keys.rows_naming(who.keys)})
    for start in range(0, len(found), SCAN_CHUNK):
        chunk = Notification.objects.filter(pk__in=found[start : start + SCAN_CHUNK]).order_by("pk")
        for pk, recipient, *values in chunk.values_list("pk", "recipient", *SCANNED[1:]):
            if _is_theirs(recipient, who):
                whole.add(pk)
            elif who.address and _names_them(tuple(values), who.address):
                named.append(pk)
    changed: list[Any] = []
    for start in range(0, len(named), SCAN_CHUNK):
        rows, _ = load_defensively(Notification.objects.filter(pk__in=named[start : start + SCAN_CHUNK]))
        for row in rows:
            fate = _fate(row, who.address)
            if fate == NOBODY_LEFT:
                whole.add(row.pk)
            elif fate is None:
                changed.append(row.pk)
    return Plan(sorted(whole), sorted(changed))


SCANNED = ("pk", *ADDRESS_FIELDS, "from_email", "headers", "pending_recipients", "last_error", "previous_error")


def _is_theirs(recipient: Any, who: Person) -> bool:
    """Whether a row's `recipient` is the person: their id, or their address however spelt."""
    if not isinstance(recipient, str) or not recipient:
        return False
    return recipient in who.keys or bool(who.address and "@" in recipient and bare(recipient) == who.address)


def _names_them(values: tuple[Any, ...], key: str) -> bool:
    """Whether a row's `SCANNED` columns (after the pk) hold anything `take_out` would take."""
    if key.rpartition("@")[0] not in " ".join(map(str, values)).casefold():
        return False  # every spelling holds the local part: most rows are passed over here, cheaply
    return bool(take_out(Notification(**dict(zip(SCANNED[1:], values, strict=True))), key))


def _owed(pending: Any) -> list[Any]:
    """The addresses a firing still owes (`Notification.pending_recipients`), as stored."""
    owed = pending.get("addresses") if isinstance(pending, dict) else None
    return owed if isinstance(owed, list) else []


def _is(address: Any, key: str) -> bool:
    return isinstance(address, str) and normalise(address) == key


def take_out(row: Notification, key: str) -> list[str]:
    """Take the normalised address `key` out of `row`, in memory; returns the fields changed.

    Every spelling goes from To, Cc, Bcc and Reply-To; a From that is theirs becomes blank
    (the site's DEFAULT_FROM_EMAIL); a header naming them is dropped; a firing that still
    owes them no longer does (owing nobody else, it owes every recipient left); an error
    naming them reads `<erased>` in its place. The rest is the site's content (subject,
    bodies, payload, a queued message's attributes) and is not rewritten.
    """
    changed: list[str] = []
    for name in ADDRESS_FIELDS:
        value = getattr(row, name)
        if names(value, key):
            setattr(row, name, without(value, key))
            changed.append(name)
    if mentions(row.from_email, key):
        row.from_email = ""
        changed.append("from_email")
    if isinstance(row.headers, dict) and any(mentions(v, key) for v in row.headers.values()):
        row.headers = {name: v for name, v in row.headers.items() if not mentions(v, key)}
        changed.append("headers")
    owed = _owed(row.pending_recipients)
    if any(_is(address, key) for address in owed):
        left = [address for address in owed if not _is(address, key)]
        row.pending_recipients = {**(row.pending_recipients or {}), "addresses": left} if left else None
        changed.append("pending_recipients")
    for name in ("last_error", "previous_error"):
        text = getattr(row, name)
        if isinstance(text, str) and (cleaned := redact(text, key)) != text:
            setattr(row, name, cleaned)
            changed.append(name)
    return changed


def _fate(row: Notification, key: str) -> str | None:
    """What taking `key` out of `row` comes to: None when the row keeps going to the
    others; NOBODY_LEFT when it sent to the person and nobody else is left (or the change
    would leave its addresses invalid); NOTHING_OF_THEIRS when it no longer names them."""
    trial = copy.copy(row)
    changed = take_out(trial, key)
    if not changed:
        return NOTHING_OF_THEIRS
    had = any(as_list(getattr(row, name)) for name in RECIPIENT_FIELDS)
    if had and not any(as_list(getattr(trial, name)) for name in RECIPIENT_FIELDS):
        return NOBODY_LEFT
    # The change is validated as a save would: a row it left invalid cannot be sent without them.
    before, after = validation.field_errors(row), validation.field_errors(trial)
    if any(after.get(name) and after.get(name) != before.get(name) for name in changed):
        return NOBODY_LEFT
    return None


def _taking_out(who: Person, emptied: list[Any]) -> RowAction:
    """The change of a shared row, for `act` (which re-reads each row under lock): a row with
    nobody else left is not changed but noted in `emptied`, for `purge`."""

    def refusal(row: Notification, now: datetime) -> str | None:
        fate = _fate(row, who.address)
        if fate == NOBODY_LEFT:
            emptied.append(row.pk)
        return fate

    def change(row: Notification, now: datetime) -> None:
        take_out(row, who.address)
        # A firing in flight: its write-back would land on the changed row. Taken back, it
        # lands nowhere (fenced by the token) and records nothing; the row waits out the lease.
        row.claim_token = None

    return RowAction("erase", refusal, change, TAKEN_OUT_FIELDS)


def _attempts(who: Person, rows: list[Any]) -> Any:
    """The person's delivery records: those of their rows, those that name them (a row
    delivered and deleted leaves its records behind: by its `recipient`, or sent to their
    address, either spelling), and any whose error names their address."""
    match = Q(notification_id__in=rows) if rows else Q(pk__in=[])
    if who.recipient:
        match |= Q(recipient=who.recipient)
    for spelling in spellings(who.address) if who.address else []:
        match |= Q(sent_to__icontains=spelling) | Q(error__icontains=spelling)
    return DeliveryAttempt.objects.filter(match)


def _admin_history(who: Person, rows: list[Any]) -> Any:
    """The admin's history entries (`LogEntry`) about the person: those of their rows and
    preferences, and any whose text names their address in any spelling (a preference's
    `object_repr` is its recipient). None without django.contrib.admin."""
    if not apps.is_installed("django.contrib.admin"):
        return None
    from django.contrib.admin.models import LogEntry
    from django.contrib.contenttypes.models import ContentType

    types = ContentType.objects.get_for_models(Notification, Preference)
    preferences = Preference.objects.filter(recipient__in=who.keys).values_list("pk", flat=True)
    match = Q(content_type=types[Notification], object_id__in=[str(pk) for pk in rows]) | Q(
        content_type=types[Preference], object_id__in=[str(pk) for pk in preferences]
    )
    for spelling in spellings(who.address) if who.address else []:
        match |= Q(object_repr__icontains=spelling) | Q(change_message__icontains=spelling)
    return LogEntry.objects.filter(match, content_type__in=types.values())


def _throttles(who: Person) -> Q:
    match = Q(pk__in=[])
    for key in who.keys:
        match |= Q(key__endswith=f" {key}")
    return match


def _suppression(who: Person, keep_suppression: bool) -> str | None:
    """The suppression entry that goes with the person (`keep_suppression=False`), if any."""
    return storable(who.address) if who.address and not keep_suppression else None


def describe(who: Person, keep_suppression: bool = True) -> dict[str, int]:
    """What `erase` would do, counted under the names (and in the order) `erase` returns."""
    todo = plan(who)
    stored = _suppression(who, keep_suppression)
    return {
        "notifications": len(todo.whole),
        "notifications_changed": len(todo.changed),
        "delivery_attempts": _attempts(who, todo.whole).count(),
        "preferences": Preference.objects.filter(recipient__in=who.keys).count(),
        "inbox_messages": InboxMessage.objects.filter(recipient__in=who.keys).count(),
        "throttles": ThrottleWindow.objects.filter(_throttles(who)).count(),
        "suppressions": Suppression.objects.filter(address=stored).count() if stored else 0,
        "admin_history": history.count() if (history := _admin_history(who, todo.whole)) is not None else 0,
    }


def erase(recipient: str = "", address: str = "", keep_suppression: bool = True) -> dict[str, int]:
    """Delete what the queue holds about a person; returns the counts by kind.

    Their rows (and the attachments' files) go; their address is taken out of rows that
    others still receive (`notifications_changed`). Their delivery records, inbox messages,
    preferences, throttle windows and the admin's history entries about them
    (`admin_history`) go. The suppression list keeps the address (so mail is still not sent
    to an address that bounced or complained) unless `keep_suppression=False`.
    """
    who = person(recipient, address)
    todo = plan(who)
    emptied: list[Any] = []
    changed = act(_taking_out(who, emptied), todo.changed) if todo.changed else ActionResult()
    whole = todo.whole + emptied
    counts = {"notifications": purge(whole) if whole else 0, "notifications_changed": changed.changed}
    with transaction.atomic():
        counts["delivery_attempts"] = _attempts(who, whole).delete()[0]
        history = _admin_history(who, whole)  # before the preferences it names by id go
        counts["admin_history"] = history.delete()[0] if history is not None else 0
        counts["preferences"] = Preference.objects.filter(recipient__in=who.keys).delete()[0]
        counts["inbox_messages"] = InboxMessage.objects.filter(recipient__in=who.keys).delete()[0]
        counts["throttles"] = ThrottleWindow.objects.filter(_throttles(who)).delete()[0]
        suppressions = 0
        stored = _suppression(who, keep_suppression)
        if stored:
            suppressions = Suppression.objects.filter(address=stored).delete()[0]
            # Deleting a suppression records its lift, which names the address too.
            SuppressionLift.objects.filter(address=stored).delete()
        counts["suppressions"] = suppressions
        address_keys.forget(who.keys)  # a row deleted or changed took its entries; nothing else may name them
    counts["admin_history"] = counts.pop("admin_history")  # last, as `describe` names it
    return counts
