"""The HTTP API's system check (`notifications.http_api`): a site that configured the API (an `NOTIFICATIONS_API_*`
setting) without its extra installed is told so with a warning; nothing else stops."""

from __future__ import annotations

import importlib.util
from typing import Any

from django.conf import settings
from django.core import checks

API_SETTINGS = (
    "NOTIFICATIONS_API_MAX_BATCH",
    "NOTIFICATIONS_API_MAX_BODY",
    "NOTIFICATIONS_API_RATE_LIMIT",
    "NOTIFICATIONS_API_IDEMPOTENCY_LEASE",
)


@checks.register()
def check_api_installed(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    asked = [name for name in API_SETTINGS if hasattr(settings, name)]
    if not asked or importlib.util.find_spec("ninja") is not None:
        return []
    return [
        checks.Warning(
            f"{', '.join(asked)} is set, but the HTTP API is not mounted: django-ninja is not installed.",
            hint='Install the api extra (pip install "django-notification-queue[api]"), or remove the setting.',
            id="notifications.W060",
        )
    ]
