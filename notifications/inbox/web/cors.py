"""Cross-origin front ends of the inbox's JSON endpoints (NOTIFICATIONS_INBOX_ALLOWED_ORIGINS).

By default no CORS header is sent. For a listed origin, a preflight (`OPTIONS`) answers
with that exact origin (never `*`), credentials allowed and `Vary: Origin`; the actual
response carries the same plus `Access-Control-Expose-Headers: ETag` (a browser applies
what the actual response says, not the preflight). Whatever CORS a browser would apply, a
POST from an `Origin` neither the site's own nor listed is refused 403; one from a listed
origin is checked for CSRF as Django checks one from CSRF_TRUSTED_ORIGINS.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import cast

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.cache import patch_vary_headers
from django.utils.decorators import decorator_from_middleware
from django.views.decorators.csrf import csrf_exempt

from notifications.conf import inbox_allowed_origins

View = Callable[..., HttpResponse]
ALLOW_METHODS = "GET, POST"
# What the endpoints read from a cross-origin request besides the simple headers.
ALLOW_HEADERS = "Content-Type, If-None-Match, X-CSRFToken"
PREFLIGHT_MAX_AGE = "600"  # seconds a browser may keep a preflight's answer


def listed_origin(request: HttpRequest) -> str | None:
    """The request's `Origin` when it is one of the allowed origins, else None."""
    origin = request.headers.get("Origin")
    return origin if origin and origin in inbox_allowed_origins() else None


def own_origin(request: HttpRequest) -> str:
    """The site's origin as this request reached it (as Django's CSRF check spells it)."""
    return f"{'https' if request.is_secure() else 'http'}://{request.get_host()}"


class ListedOriginsCsrf(CsrfViewMiddleware):
    """Django's CSRF check, with the listed origins trusted as CSRF_TRUSTED_ORIGINS are
    (a private hook of Django's: see its section in notifications/compat.py)."""

    def _origin_verified(self, request: HttpRequest) -> bool:
        trusted: bool = super()._origin_verified(request)  # type: ignore[misc] # not in django-stubs
        return listed_origin(request) is not None or trusted


_csrf_for_listed_origins = decorator_from_middleware(ListedOriginsCsrf)


def _allow(response: HttpResponse, origin: str) -> None:
    response["Access-Control-Allow-Origin"] = origin
    response["Access-Control-Allow-Credentials"] = "true"


def cross_origin(view: View) -> View:
    """Wrap a JSON endpoint: answer preflights, mark actual responses for listed origins,
    refuse a foreign POST, and check CSRF with the listed origins trusted."""
    checked = _csrf_for_listed_origins(view)

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        origin = listed_origin(request)
        if request.method == "OPTIONS":
            response = HttpResponse(status=204)
            if origin:
                _allow(response, origin)
                response["Access-Control-Allow-Methods"] = ALLOW_METHODS
                response["Access-Control-Allow-Headers"] = ALLOW_HEADERS
                response["Access-Control-Max-Age"] = PREFLIGHT_MAX_AGE
            patch_vary_headers(response, ["Origin"])
            return response
        sent_origin = request.headers.get("Origin")
        if request.method == "POST" and sent_origin and not origin and sent_origin != own_origin(request):
            response = JsonResponse({"error": "origin not allowed"}, status=403)
        else:
            response = cast(HttpResponse, checked(request, *args, **kwargs))
        if origin:
            _allow(response, origin)
            response["Access-Control-Expose-Headers"] = "ETag"
        patch_vary_headers(response, ["Origin"])
        return response

    # Django's middleware would check CSRF without the listed origins: `checked` does it with them.
    return csrf_exempt(wrapper)
