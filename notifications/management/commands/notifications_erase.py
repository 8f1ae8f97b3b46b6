"""`manage.py notifications_erase --recipient user:42 [--address ada@example.com]`: erase a person.

Deletes their rows (and attachments), takes their address out of rows others still receive,
and deletes their delivery records, preferences and throttle windows (`notifications.api.erase`);
the suppression list keeps the address unless `--drop-suppression`. `--dry-run` prints the
counts the run would print, by the same names: `notifications`, `notifications_changed`,
`delivery_attempts`, `preferences`, `throttles`, `suppressions`.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from notifications.services import erasure


class Command(BaseCommand):
    help = "Erase what the queue holds about one person: their rows, delivery records and preferences."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--recipient", default="", help="the host's id for the person, e.g. user:42")
        parser.add_argument("--address", default="", help="the person's email address")
        parser.add_argument(
            "--drop-suppression", action="store_true", help="also remove the address from the suppression list"
        )
        parser.add_argument("--dry-run", action="store_true", help="count what would go; delete nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            who = erasure.person(options["recipient"], options["address"])
        except ValidationError as exc:
            raise CommandError(" ".join(m for ms in exc.message_dict.values() for m in ms)) from None
        keep = not options["drop_suppression"]
        if options["dry_run"]:  # the same counts, by the same names, as the run
            counts = erasure.describe(who, keep_suppression=keep)
            self.stdout.write("would erase: " + " ".join(f"{k}={v}" for k, v in counts.items()))
            return
        counts = erasure.erase(who.recipient, who.address, keep_suppression=keep)
        self.stdout.write("erased: " + " ".join(f"{k}={v}" for k, v in counts.items()))
