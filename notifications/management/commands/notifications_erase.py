"""`manage.py notifications_erase --recipient user:42 [--address ada@example.com]`: erase a person.

Deletes their rows (and attachments), delivery records, preferences and throttle windows
(`notifications.api.erase`); the suppression list keeps the address unless
`--drop-suppression`. `--dry-run` counts what would go.
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
        if options["dry_run"]:
            counts = erasure.describe(who)
            self.stdout.write("would erase: " + " ".join(f"{k}={v}" for k, v in counts.items()))
            return
        counts = erasure.erase(who.recipient, who.address, keep_suppression=not options["drop_suppression"])
        self.stdout.write("erased: " + " ".join(f"{k}={v}" for k, v in counts.items()))
