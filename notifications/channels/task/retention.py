"""Finished task results are kept `OPTIONS["RESULT_RETENTION_DAYS"]` days (7) per backend."""

from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction

from notifications.models import Notification, TaskRun

logger = logging.getLogger("notifications.tick")

BACKEND_PATH = "notifications.tasks.QueueBackend"
DEFAULT_RETENTION_DAYS = 7
PRUNE_BATCH = 1000  # results deleted per backend and tick at most: housekeeping stays short


def retention_days(options: Any) -> float:
    """The backend's RESULT_RETENTION_DAYS, its default where it is not a positive number."""
    days = options.get("RESULT_RETENTION_DAYS", DEFAULT_RETENTION_DAYS) if isinstance(options, dict) else None
    usable = isinstance(days, int | float) and not isinstance(days, bool) and math.isfinite(days) and days > 0
    return float(days) if usable and days is not None else DEFAULT_RETENTION_DAYS


def configured() -> dict[str, Any]:
    """The aliases of `TASKS` that name this app's backend, with their OPTIONS."""
    tasks = getattr(settings, "TASKS", None)
    if not isinstance(tasks, dict):
        return {}
    return {
        alias: entry.get("OPTIONS")
        for alias, entry in tasks.items()
        if isinstance(entry, dict) and entry.get("BACKEND") == BACKEND_PATH
    }


def backends() -> dict[str, float]:
    """The aliases of `TASKS` that name this app's backend, with their retention in days."""
    return {alias: retention_days(options) for alias, options in configured().items()}


def prune(now: datetime) -> int:
    """Delete results finished before their backend's retention, and records whose row was
    purged before they finished; how many went."""
    deleted = 0
    for alias, days in backends().items():
        cutoff = now - timedelta(days=days)
        finished = TaskRun.objects.filter(backend=alias, finished_at__lt=cutoff).values("pk")[:PRUNE_BATCH]
        orphans = (
            TaskRun.objects.filter(backend=alias, finished_at__isnull=True, enqueued_at__lt=cutoff)
            .exclude(notification_id__in=Notification.objects.values("pk"))
            .values("pk")[:PRUNE_BATCH]
        )
        with transaction.atomic():
            for old in (finished, orphans):
                deleted += TaskRun.objects.filter(pk__in=list(old.values_list("pk", flat=True))).delete()[0]
    return deleted
