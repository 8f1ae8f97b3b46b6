"""Bearer tokens and their scopes. Only `Authorization: Bearer` authenticates: a session
cookie is never looked at, so a logged-in admin's browser on a hostile page gets a 401
and no CSRF exemption is ever reached through cookies."""

from __future__ import annotations

import math
import time
from typing import Any

from django.http import HttpRequest
from ninja.security import HttpBearer

from notifications.conf import app_settings
from notifications.flow import ratelimit
from notifications.http_api.problems import Problem
from notifications.models import ApiToken
from notifications.services import tokens

_CACHE = "_notifications_api_token"


def presented(request: HttpRequest) -> ApiToken | None:
    """The live token the request carries, or None; read once per request (the guard and
    the operation share it), never cached across requests (a revocation holds at once)."""
    if not hasattr(request, _CACHE):
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        record = tokens.authenticate(token.strip()) if scheme.lower() == "bearer" else None
        setattr(request, _CACHE, record)
    found: ApiToken | None = getattr(request, _CACHE)
    return found


class TokenAuth(HttpBearer):
    """A live token holding `scope`: none or a bad one is a 401, a missing scope a 403.
    (Its rate limit was applied by `guard`, before any transaction.)"""

    def __init__(self, scope: str) -> None:
        super().__init__()
        self.scope = scope

    def __call__(self, request: HttpRequest) -> Any:
        # ninja's own __call__ logs an unexpected header under DEBUG: a secret in a log.
        record = presented(request)
        if record is None:
            return None
        if self.scope not in record.scopes:
            raise Problem(403, f"This token lacks the {self.scope!r} scope.")
        return record

    def authenticate(self, request: HttpRequest, token: str) -> Any:  # pragma: no cover - __call__ decides
        return presented(request)


def throttle(record: ApiToken) -> None:
    """A 429 with Retry-After once the token has used NOTIFICATIONS_API_RATE_LIMIT: the
    same database token buckets as the channels' rate limits, so every host shares them."""
    spec = app_settings.API_RATE_LIMIT
    if not spec:
        return
    try:
        limits = ratelimit.parse(spec)
    except ValueError:
        return  # a malformed limit stops nothing else (the setting's table says what it takes)
    now = time.time()
    grant = ratelimit.take(f"api-token {record.pk}", limits, 1, now)
    if not grant.granted:
        wait = max(1, math.ceil(grant.next_at - now))
        raise Problem(429, f"This token's rate limit ({spec}) is used up.", retry_after=wait)
