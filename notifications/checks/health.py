"""Checks that read the queue's records (`check --database`): ticks finishing (W100) and the
hosts' clocks (W101)."""

from __future__ import annotations

import contextlib
import socket
from typing import Any

from django.core import checks
from django.db import router


@checks.register(checks.Tags.database)
def check_ticks_running(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """W100: no tick has finished lately, so nothing is delivered. Runs with `check --database`."""
    from django.db import DatabaseError

    from notifications.health.queue import queue_health
    from notifications.models import TickRun

    if router.db_for_read(TickRun) not in (databases or ()):
        return []
    try:
        health = queue_health()
    except DatabaseError:
        return []  # tables not migrated yet: `migrate` runs database checks first
    if not health.stale:
        return []
    return [
        checks.Warning(
            health.warning or "No tick has finished lately.",
            hint="Install the cron line (python manage.py crontab add) or run `manage.py runtick --loop 60`; "
            "`manage.py notifications_status` shows the queue.",
            id="notifications.W100",
        )
    ]


CLOCK_HINT = (
    "Leases and due times are read on each host's own clock: a host ahead re-claims rows another tick is "
    "still sending, one behind sends late. Keep every host (and the database server) synchronised with NTP "
    "(chrony, systemd-timesyncd); `manage.py notifications_status` shows each host's offset."
)


@checks.register(checks.Tags.database)
def check_clock_skew(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """W101: this host's clock, measured now, or a ticking host's, as its last tick measured it, is off.

    Runs with `check --database`. Reports only: ticks run whatever the clocks say.
    """
    from django.db import DatabaseError

    from notifications.health.clock import measure_offset
    from notifications.health.queue import clock_threshold, describe_offset, recorded_clock_offsets
    from notifications.models import TickRun

    alias = router.db_for_read(TickRun) or "default"
    if alias not in (databases or ()):
        return []
    limit = clock_threshold()
    offsets: dict[str, tuple[float, str]] = {}
    with contextlib.suppress(DatabaseError):  # tables not migrated yet: `migrate` runs database checks first
        offsets.update((host, (offset, "by its last tick")) for host, offset in recorded_clock_offsets(alias).items())
    here = socket.gethostname()[:255]
    measured = measure_offset(alias)
    if measured is not None:
        offsets[here] = (measured, "now")  # a live reading replaces this host's record
    return [
        checks.Warning(
            f"The clock of {host}{' (this host)' if host == here else ''} is {describe_offset(offset)} the "
            f"database's clock (measured {when}), more than NOTIFICATIONS_MAX_CLOCK_OFFSET ({limit:g}s).",
            hint=CLOCK_HINT,
            id="notifications.W101",
        )
        for host, (offset, when) in offsets.items()
        if abs(offset) > limit
    ]
