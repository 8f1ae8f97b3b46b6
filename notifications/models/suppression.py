"""The suppression list: addresses email is no longer sent to, and when each was last lifted."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from notifications.models.addresses import MAX_STORED_ADDRESS, normalise, storable

LOOKUP_CHUNK = 500  # addresses per query: well within every backend's parameter limit


class SuppressionQuerySet(models.QuerySet["Suppression"]):
    def among(self, addresses: Iterable[str]) -> set[str]:
        """Which of `addresses` are suppressed, as `addresses.normalise` spells them (the
        suppression list's own spelling: IDNA domain, casefolded)."""
        wanted = sorted({key for a in addresses if a and (key := storable(a))})
        found: set[str] = set()
        for start in range(0, len(wanted), LOOKUP_CHUNK):
            chunk = wanted[start : start + LOOKUP_CHUNK]
            found.update(self.filter(address__in=chunk).values_list("address", flat=True))
        return found


class Suppression(models.Model):
    """An address email is no longer sent to: refused permanently, bounced, complained about.

    Added by the tick (an SMTP 5xx for the recipient, a provider's rejection) and by
    django-anymail's tracking webhooks; an operator lifts one by deleting it. Addresses
    are stored and compared as `notifications.models.addresses.normalise` spells them:
    the domain IDNA-encoded, everything casefolded, so `Bounce@Exämple.com` and
    `bounce@xn--exmple-cua.com` are one entry.
    """

    address = models.EmailField(max_length=254, unique=True)
    reason = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    objects = SuppressionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.address

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.address = normalise(self.address)
        super().save(*args, **kwargs)

    def clean(self) -> None:
        # Before the uniqueness check of a form (the admin's add page): `Foo@Example.com`
        # is the entry `foo@example.com` already holds, an error rather than a 500 on save.
        # The field's own check saw the address as typed: its IDNA spelling may be longer
        # than the column.
        self.address = normalise(self.address)
        if self.address and storable(self.address) is None:
            raise ValidationError(
                {
                    "address": f"Spelled as mail is sent (its domain IDNA-encoded) this address has "
                    f"{len(self.address)} characters; the list holds at most {MAX_STORED_ADDRESS} characters."
                }
            )


class SuppressionLift(models.Model):
    """When an operator last lifted the suppression of an address (deleted its `Suppression`).

    Providers replay tracking webhooks (retries, a "resend events" button): an event that
    happened at or before the lift must not suppress the address again. One row per
    address, spelled as `Suppression.address` is; written by `notifications.services.suppression`.
    """

    address = models.EmailField(max_length=254, unique=True)
    lifted_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.address
