"""The HTTP API's bearer tokens: create, revoke, and who a presented token is.

A token is 32 random bytes (URL-safe base64); only its SHA-256 is stored. A fast hash is
enough for a secret that long (no dictionary to try), and the lookup by hash is followed
by a constant-time comparison so a near miss says nothing about the stored value.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from notifications.models.tokens import SCOPES, ApiToken

TOKEN_BYTES = 32
# `last_used_at` is written at most this often per token: one UPDATE a minute, not one a request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def digest(token: str) -> str:
    """The stored form of `token`: its SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def parse_scopes(text: str) -> list[str]:
    """`"schedule,read"` as a list; ValidationError naming an unknown scope."""
    scopes = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown or not scopes:
        raise ValidationError(
            {"scopes": [f"Give scopes among {', '.join(SCOPES)} (not {', '.join(unknown) or 'none'})."]}
        )
    return list(dict.fromkeys(scopes))


def create(name: str, scopes: list[str]) -> tuple[ApiToken, str]:
    """A new token named `name`: (the record, the token itself, which is never stored)."""
    name = name.strip()
    if not name or len(name) > ApiToken._meta.get_field("name").max_length:  # type: ignore[operator]
        raise ValidationError({"name": ["Give a name of 1 to 100 characters."]})
    token = secrets.token_urlsafe(TOKEN_BYTES)
    try:
        with transaction.atomic():
            record = ApiToken.objects.create(name=name, scopes=scopes, token_hash=digest(token))
    except IntegrityError:
        raise ValidationError({"name": [f"A token named {name!r} exists already."]}) from None
    return record, token


def revoke(name: str, now: datetime | None = None) -> bool:
    """Revoke the token named `name`; False if there is none not yet revoked."""
    return ApiToken.objects.filter(name=name, revoked_at=None).update(revoked_at=now or timezone.now()) > 0


def authenticate(token: str, now: datetime | None = None) -> ApiToken | None:
    """The live token `token` is, or None (unknown or revoked). Read from the database on
    every request, so a revocation holds at once on every host."""
    if not token or len(token) > 200:
        return None
    wanted = digest(token)
    record = ApiToken.objects.filter(token_hash=wanted, revoked_at=None).first()
    if record is None or not hmac.compare_digest(record.token_hash, wanted):
        return None
    now = now or timezone.now()
    if record.last_used_at is None or now - record.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=record.pk).update(last_used_at=now)
        record.last_used_at = now
    return record
