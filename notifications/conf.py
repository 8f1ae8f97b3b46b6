"""The app's settings: `NOTIFICATIONS_<NAME>` read at access time, defaults in one table.

Reading lazily keeps `override_settings` working in tests and keeps settings out of
import time. Values are not validated here: `notifications.checks` reports bad ones
through `manage.py check`.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings


class Defaults:
    """Defaults for every `NOTIFICATIONS_<NAME>` setting (see the README's table)."""

    TICK_LIMIT: int = 100  # rows claimed per batch
    MAX_RETRIES: int = 3  # attempts of one firing before it is dead-lettered
    BACKOFF: tuple[int, ...] = (60, 300, 1800)  # seconds before retry 1, 2, 3 ...
    CHANNEL_TIMEOUT: float = 10  # total deadline of one channel send, in seconds
    TICK_BUDGET: float = 50  # seconds after which a tick stops claiming batches
    LEASE: float | None = None  # claim lifetime; None derives it from budget and timeout
    CONCURRENCY: int = 16  # rows delivered at once; measured in the README's Performance section
    WEBHOOK_SECRET: str | list[str] = ""
    WEBHOOK_ALLOWED_NETWORKS: list[str] = []
    RESPONSE_BODY_LIMIT: int = 64 * 1024  # bytes of a webhook response ever read
    ATTEMPT_RETENTION_DAYS: int = 30
    # Bytes of a payload's compact JSON (as the webhook sends it): each claimed row is held
    # in memory by the tick and the change page, so one oversized row costs every tick.
    MAX_PAYLOAD_BYTES: int = 64 * 1024
    # Seconds a host's clock may differ from the database's before it is reported:
    # leases and due times are read on each host's own clock (see notifications.clock).
    MAX_CLOCK_OFFSET: float = 5


class Settings:
    """Attribute access to the app's settings, e.g. `app_settings.TICK_LIMIT`."""

    prefix = "NOTIFICATIONS_"

    def __getattr__(self, name: str) -> Any:
        if not hasattr(Defaults, name):
            raise AttributeError(name)
        return getattr(django_settings, self.prefix + name, getattr(Defaults, name))

    @property
    def lease(self) -> float:
        """Seconds a claim lives; by default longer than a tick can hold its rows."""
        if self.LEASE is not None:
            return float(self.LEASE)
        return float(self.TICK_BUDGET) + 2 * float(self.CHANNEL_TIMEOUT) + 60

    @property
    def webhook_secrets(self) -> list[str]:
        """The site's signing secrets, newest first; a single string is one key."""
        secret = self.WEBHOOK_SECRET
        if isinstance(secret, str):
            return [secret] if secret else []
        return [s for s in secret if s]


app_settings = Settings()
