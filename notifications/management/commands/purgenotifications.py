"""`manage.py purgenotifications --dead --older-than 30d [--dry-run]`: clean up dead letters from cron.

A purge of many rows says how far it got, at most every `PROGRESS_INTERVAL` seconds; its
lines, and the closing one, start with the time (ISO 8601) for the cron job's log.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.translation import ngettext

from notifications import services
from notifications.health.queue import humanize
from notifications.management.arguments import age_or_zero
from notifications.management.output import stamp
from notifications.models import Notification

PROGRESS_INTERVAL = 5.0  # seconds between progress lines of a big purge


class Command(BaseCommand):
    help = (
        "Delete dead letters (firings that came too late included) that were dead-lettered longer ago than "
        "--older-than (0: all of them). Recurring "
        "rows whose schedule still runs are kept (purge those in the admin). Delivery history stays until it expires."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--dead", action="store_true", help="purge dead letters (required: the only kind so far)")
        parser.add_argument(
            "--older-than",
            type=age_or_zero,
            required=True,
            metavar="AGE",
            help="only rows dead-lettered longer ago than this, e.g. 30d, 12h; 0 for every dead letter",
        )
        parser.add_argument("--dry-run", action="store_true", help="list what would go; delete nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["dead"]:
            raise CommandError("Say what to purge: --dead (dead letters).")
        older_than: timedelta = options["older_than"]
        now = timezone.now()
        cutoff = now - older_than
        old = Notification.objects.dead_letters(now).filter(dead_lettered_at__lte=cutoff)
        # A recurring row whose schedule skipped forward still fires: deleting it from a
        # cron job would silently end someone's reminders.
        still_scheduled = old.exclude(recurrence_rule="").filter(next_fire_at__isnull=False)
        doomed = old.exclude(pk__in=still_scheduled.values("pk")).order_by("dead_lettered_at", "pk")
        kept = still_scheduled.count()
        if older_than:
            what = f"older than {humanize(older_than)} (dead-lettered before {cutoff:%Y-%m-%d %H:%M:%S%z})"
        else:
            what = "of any age"
        if options["dry_run"]:
            rows = list(doomed.values_list("pk", "dead_lettered_at", "last_error"))
            for pk, dead_at, error in rows:
                self.stdout.write(f"would purge #{pk}: dead-lettered {dead_at:%Y-%m-%d %H:%M:%S%z}: {error or '-'}")
            self.stdout.write(f"dry run: would purge {dead_letters(len(rows))} {what}; {kept_line(kept)}")
            return
        purged = services.purge(doomed, on_batch=self.progress())
        self.stdout.write(stamp(f"purged {dead_letters(purged)} {what}; {kept_line(kept)}"))

    def progress(self) -> Callable[[int, int], None]:
        """A batch callback that writes `purging: N of M dead letters deleted` now and then."""
        last = time.monotonic()

        def report(deleted: int, total: int) -> None:
            nonlocal last
            if deleted >= total or time.monotonic() - last < PROGRESS_INTERVAL:
                return  # the closing line says the rest
            last = time.monotonic()
            self.stdout.write(stamp(f"purging: {deleted} of {total} dead letters deleted"))

        return report


def dead_letters(count: int) -> str:
    return ngettext("%(count)d dead letter", "%(count)d dead letters", count) % {"count": count}


def kept_line(count: int) -> str:
    return ngettext(
        "kept %(count)d recurring row still scheduled", "kept %(count)d recurring rows still scheduled", count
    ) % {"count": count}
