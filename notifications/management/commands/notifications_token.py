"""`manage.py notifications_token create NAME --scope schedule,read,manage | revoke NAME | list`:
the HTTP API's bearer tokens (docs/api.md).

`create` prints the token alone on the last line of its output, once: only its hash is kept.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from notifications.models import ApiToken
from notifications.services import tokens


class Command(BaseCommand):
    help = "Create, revoke and list the HTTP API's bearer tokens."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="a new token; printed once, on the last line")
        create.add_argument("name")
        create.add_argument("--scope", required=True, help="comma-separated: schedule, read, manage")
        revoke = actions.add_parser("revoke", help="refuse the token from now on, on every host")
        revoke.add_argument("name")
        actions.add_parser("list", help="names, scopes and dates (never a secret)")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "create":
            try:
                record, token = tokens.create(options["name"], tokens.parse_scopes(options["scope"]))
            except ValidationError as exc:
                raise CommandError(" ".join(m for ms in exc.message_dict.values() for m in ms)) from None
            self.stdout.write(f"Created token {record.name!r} ({', '.join(record.scopes)}). It is shown only now:")
            self.stdout.write(token)
        elif action == "revoke":
            if not tokens.revoke(options["name"]):
                raise CommandError(f"No live token is named {options['name']!r}.")
            self.stdout.write(f"Revoked {options['name']!r}.")
        else:
            for record in ApiToken.objects.all():
                revoked = f" revoked {record.revoked_at:%Y-%m-%d %H:%M}" if record.revoked_at else ""
                used = f"{record.last_used_at:%Y-%m-%d %H:%M}" if record.last_used_at else "never"
                self.stdout.write(f"{record.name}\t{','.join(record.scopes)}\tlast used {used}{revoked}")
