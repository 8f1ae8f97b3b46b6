"""The inbox channel's own system checks."""

from __future__ import annotations

from django.core import checks

from notifications.conf import Defaults, app_settings, is_usable


def check_retention() -> list[checks.CheckMessage]:
    """W050: NOTIFICATIONS_INBOX_RETENTION_DAYS unusable. A warning: the tick keeps
    messages for the default instead, and nothing else waits for it."""
    value = app_settings.INBOX_RETENTION_DAYS
    if is_usable("INBOX_RETENTION_DAYS", value, integer=False):
        return []
    default = Defaults.INBOX_RETENTION_DAYS
    return [
        checks.Warning(
            f"NOTIFICATIONS_INBOX_RETENTION_DAYS must be a positive number of days, not {value!r}: "
            f"inbox messages are kept {default} days.",
            hint=f"Set it to the days a message is kept, or remove it for the default ({default}).",
            id="notifications.W050",
        )
    ]
