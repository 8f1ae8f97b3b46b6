"""What starts the ticks: django-crontab's `crontab` binary (W003) and the cron interval the
other checks reason with."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks

DEFAULT_TICK_INTERVAL = 60.0  # the README's cron line: every minute


@checks.register()
def check_crontab(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """`manage.py crontab add` writes through the `crontab` binary; without it nothing ticks."""
    executable = getattr(settings, "CRONTAB_EXECUTABLE", None)  # django-crontab's own setting
    if not apps.is_installed("django_crontab") or shutil.which(executable or "crontab"):
        return []
    where = (
        f"CRONTAB_EXECUTABLE ({executable!r}) is not an executable"
        if executable
        else "there is no `crontab` binary on PATH"
    )
    return [
        checks.Warning(
            f"django_crontab is in INSTALLED_APPS but {where}, so `manage.py crontab add` cannot install the tick.",
            hint="Install cron (Debian/Ubuntu: apt install cron), or run `manage.py runtick --loop 60` under "
            "your process supervisor and remove django_crontab from INSTALLED_APPS.",
            id="notifications.W003",
        )
    ]


def cron_interval() -> float:
    """Seconds between ticks: from the `runtick` entry of CRONJOBS, else the README's every minute."""
    from croniter import croniter

    for job in getattr(settings, "CRONJOBS", None) or []:
        try:
            schedule, *rest = job
            if "runtick" not in repr(rest):
                continue
            times = croniter(schedule, datetime(2025, 1, 6, tzinfo=UTC))
            first, second = times.get_next(datetime), times.get_next(datetime)
            return (second - first).total_seconds()
        except Exception:  # noqa: BLE001, S112 - a malformed CRONJOBS entry is django-crontab's to report
            continue
    return DEFAULT_TICK_INTERVAL
