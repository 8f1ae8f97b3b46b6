"""Erasing a person: their rows (with their attachments), delivery records, preferences
and throttle windows, and on request their suppression entry.

A person is named by `recipient` (the host's id), by `address` (an email address), or
both. Rows go through `purge`, as a cancel does: a firing in flight when they go writes
nothing back over them (its write-back is fenced by its claim token, and the rows are gone).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q

from notifications.models import (
    DeliveryAttempt,
    Notification,
    Preference,
    Suppression,
    SuppressionLift,
    ThrottleWindow,
)
from notifications.models.addresses import as_list, bare, storable
from notifications.services.actions import purge

SCAN_CHUNK = 2000  # rows read at a time when looking for an address among the recipients


@dataclass(frozen=True)
class Person:
    """Who is erased: the keys their preferences may be stored under, and their address."""

    recipient: str
    address: str  # normalised (`addresses.bare`); blank: none

    @property
    def keys(self) -> list[str]:
        return [k for k in dict.fromkeys((self.recipient, self.address)) if k]


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


def rows_of(who: Person) -> list[Any]:
    """The ids of the person's rows: those for their `recipient`, and those sending to their
    address (To, Cc, Bcc; read in chunks, since addresses live in JSON columns)."""
    found: set[Any] = set()
    keys = who.keys
    if keys:
        found.update(Notification.objects.filter(recipient__in=keys).values_list("pk", flat=True))
    if who.address:
        for pk, *values in _address_columns():
            if any(bare(a) == who.address for value in values for a in as_list(value)):
                found.add(pk)
    return sorted(found)


def _address_columns() -> Iterator[tuple[Any, ...]]:
    last = None
    while True:
        query = Notification.objects.order_by("pk")
        if last is not None:
            query = query.filter(pk__gt=last)
        chunk = list(query.values_list("pk", "email_to", "email_cc", "email_bcc")[:SCAN_CHUNK])
        if not chunk:
            return
        yield from chunk
        last = chunk[-1][0]


def describe(who: Person) -> dict[str, int]:
    """What `erase` would delete, counted (for a confirmation page)."""
    rows = rows_of(who)
    return {
        "notifications": len(rows),
        "delivery_attempts": _attempts(who, rows).count(),
        "preferences": Preference.objects.filter(recipient__in=who.keys).count(),
    }


def _attempts(who: Person, rows: list[Any]) -> Any:
    """The person's delivery records: those of their rows, those that name them (a row
    delivered and deleted leaves its records behind: by its `recipient`, or sent to their
    address), and any whose error names their address."""
    match = Q(notification_id__in=rows) if rows else Q(pk__in=[])
    if who.recipient:
        match |= Q(recipient=who.recipient)
    if who.address:
        match |= Q(sent_to__icontains=who.address) | Q(error__icontains=who.address)
    return DeliveryAttempt.objects.filter(match)


def erase(recipient: str = "", address: str = "", keep_suppression: bool = True) -> dict[str, int]:
    """Delete what the queue holds about a person; returns the counts by kind.

    Their rows (and the attachments' files), delivery records, preferences and throttle
    windows go. The suppression list keeps the address (so mail is still not sent to an
    address that bounced or complained) unless `keep_suppression=False`.
    """
    who = person(recipient, address)
    rows = rows_of(who)
    counts = {"notifications": purge(Notification.objects.filter(pk__in=rows)) if rows else 0}
    with transaction.atomic():
        counts["delivery_attempts"] = _attempts(who, rows).delete()[0]
        counts["preferences"] = Preference.objects.filter(recipient__in=who.keys).delete()[0]
        throttles = 0
        for key in who.keys:
            throttles += ThrottleWindow.objects.filter(key__endswith=f" {key}").delete()[0]
        counts["throttles"] = throttles
        suppressions = 0
        if who.address and not keep_suppression:
            stored = storable(who.address)
            if stored:
                suppressions = Suppression.objects.filter(address=stored).delete()[0]
                # Deleting a suppression records its lift, which names the address too.
                SuppressionLift.objects.filter(address=stored).delete()
        counts["suppressions"] = suppressions
    return counts
