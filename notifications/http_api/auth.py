"""Bearer tokens and their scopes. Only `Authorization: Bearer` authenticates: a session
cookie is never looked at, so a logged-in admin's browser on a hostile page gets a 401
and no CSRF exemption is ever reached through cookies."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja.security import HttpBearer

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
    """A live token holding `scope`: none or a bad one is a 401, a missing scope a 403."""

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
