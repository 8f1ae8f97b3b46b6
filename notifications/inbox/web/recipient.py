"""Who the request is, as a recipient of the inbox (NOTIFICATIONS_INBOX_RECIPIENT)."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest
from django.utils.module_loading import import_string

from notifications.conf import app_settings

Resolver = Callable[[HttpRequest], "str | None"]


def signed_in_user(request: HttpRequest) -> str | None:
    """The default: `user:{pk}` for a signed-in user, None for anyone else."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    return f"user:{user.pk}"


def resolver() -> Resolver:
    """The site's function, or the default. An unimportable path raises ImportError
    (notifications.W052 reports it): the inbox's requests fail, nothing else does."""
    path = app_settings.INBOX_RECIPIENT
    return import_string(path) if path else signed_in_user


def recipient_of(request: HttpRequest) -> str | None:
    """The request's recipient, or None: anonymous, or a blank or non-string answer."""
    recipient = resolver()(request)
    return recipient if isinstance(recipient, str) and recipient else None
