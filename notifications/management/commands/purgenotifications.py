"""`manage.py purgenotifications --dead --older-than 30d [--dry-run]`: clean up dead letters from cron."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from notifications import services
from notifications.health import humanize
from notifications.management.arguments import age
from notifications.models import Notification


class Command(BaseCommand):
    help = (
        "Delete dead letters that were dead-lettered longer ago than --older-than. Recurring rows "
        "whose schedule still runs are kept (purge those in the admin). Delivery history stays until it expires."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--dead", action="store_true", help="purge dead letters (required: the only kind so far)")
        parser.add_argument(
            "--older-than",
            type=age,
            required=True,
            metavar="AGE",
            help="only rows dead-lettered longer ago than this, e.g. 30d, 12h",
        )
        parser.add_argument("--dry-run", action="store_true", help="count and list what would go; delete nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["dead"]:
            raise CommandError("Say what to purge: --dead (dead letters).")
        older_than = options["older_than"]
        cutoff = timezone.now() - older_than
        old = Notification.objects.dead().filter(dead_lettered_at__lt=cutoff)
        # A recurring row whose schedule skipped forward still fires: deleting it from a
        # cron job would silently end someone's reminders.
        still_scheduled = old.exclude(recurrence_rule="").filter(next_fire_at__isnull=False)
        doomed = old.exclude(pk__in=still_scheduled.values("pk")).order_by("dead_lettered_at", "pk")
        kept = still_scheduled.count()
        what = f"dead letters older than {humanize(older_than)} (dead-lettered before {cutoff:%Y-%m-%d %H:%M:%S%z})"
        if options["dry_run"]:
            pks = list(doomed.values_list("pk", flat=True))
            if options["verbosity"] >= 2:
                for pk in pks:
                    self.stdout.write(f"would purge #{pk}")
            self.stdout.write(f"dry run: would purge {len(pks)} {what}; kept {kept} recurring still scheduled")
            return
        purged = services.purge(doomed)
        self.stdout.write(f"purged {purged} {what}; kept {kept} recurring still scheduled")
