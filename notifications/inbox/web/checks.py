"""System checks of the inbox's web settings. Each a warning: a wrong value breaks the
inbox's requests at most, never `migrate`, the tick or the rest of the site.

| id   | what |
|------|------|
| W051 | INBOX_ALLOWED_ORIGINS is not a list of https:// origins as browsers send them (the bad entries allow nothing) |
| W052 | INBOX_RECIPIENT names no importable function (the inbox's pages and endpoints fail) |
| W053 | INBOX_POLL_SECONDS is not a positive number of seconds (the badge asks every 30 s) |
"""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.utils.module_loading import import_string

from notifications.conf import Defaults, app_settings, is_usable
from notifications.rules.origins import origin_problem

Messages = list[checks.CheckMessage]


@checks.register()
def check_inbox_web(app_configs: Any = None, **kwargs: Any) -> Messages:
    """NOTIFICATIONS_INBOX_ALLOWED_ORIGINS, _RECIPIENT and _POLL_SECONDS."""
    return _check_origins() + _check_recipient() + _check_poll_seconds()


def _check_origins() -> Messages:
    origins = app_settings.INBOX_ALLOWED_ORIGINS
    if isinstance(origins, str) or not isinstance(origins, (list, tuple)):
        return [
            checks.Warning(
                f"NOTIFICATIONS_INBOX_ALLOWED_ORIGINS must be a list of origins, not {type(origins).__name__}; "
                "no other origin may call the inbox.",
                hint='For example ["https://app.example.com"].',
                id="notifications.W051",
            )
        ]
    return [
        checks.Warning(
            f"NOTIFICATIONS_INBOX_ALLOWED_ORIGINS holds {origin!r}, which {problem}; it allows nothing.",
            hint='An https:// origin as a browser sends it in Origin, e.g. "https://app.example.com".',
            id="notifications.W051",
        )
        for origin in origins
        if (problem := origin_problem(origin)) is not None
    ]


def _check_recipient() -> Messages:
    path = app_settings.INBOX_RECIPIENT
    if path is None:
        return []
    try:
        function = import_string(path) if isinstance(path, str) else None
    except ImportError as error:
        problem = f"cannot be imported ({error})"
    else:
        if callable(function):
            return []
        problem = "is not a dotted path to a function"
    return [
        checks.Warning(
            f"NOTIFICATIONS_INBOX_RECIPIENT {problem}: the inbox's page and endpoints fail until it is fixed.",
            hint="A dotted path to f(request) -> str | None, or remove it for user:{pk} of the signed-in user.",
            id="notifications.W052",
        )
    ]


def _check_poll_seconds() -> Messages:
    value = app_settings.INBOX_POLL_SECONDS
    if is_usable("INBOX_POLL_SECONDS", value, integer=False):
        return []
    return [
        checks.Warning(
            f"NOTIFICATIONS_INBOX_POLL_SECONDS must be a positive number of seconds up to a day, not {value!r}.",
            hint=f"Remove it for the default ({Defaults.INBOX_POLL_SECONDS:g} s), which the badge uses meanwhile.",
            id="notifications.W053",
        )
    ]
