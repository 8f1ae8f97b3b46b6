"""What the app's long-running and cron-run commands write: lines a log can be read by.

Each line a command writes for the log starts with the time it was written (ISO 8601,
in `TIME_ZONE`, to the second), so `tail -f` on a cron job's log tells when each tick ran.
System checks are run the way a command run every minute wants them: errors stop it,
each on one line; warnings are shown only where a person starts the command and reads
them once (`runtick --loop`), never on every tick (`manage.py check` shows them all).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.core import checks
from django.core.management.base import SystemCheckError
from django.utils import timezone


def stamp(line: str, now: datetime | None = None) -> str:
    """`line` after the time it is written: `2025-06-02T09:00:00+02:00 claimed=...`."""
    moment = timezone.localtime(now or datetime.now(UTC))  # aware whatever USE_TZ says
    return f"{moment.isoformat(timespec='seconds')} {line}"


def one_line(message: checks.CheckMessage) -> str:
    """A check message on one line: its id, the object it is about (if any), its text."""
    parts = [f"{message.id}:" if message.id else "", "" if message.obj is None else f"{message.obj}:", str(message.msg)]
    return " ".join(" ".join(parts).split())


def run_command_checks(
    command: str,
    *,
    warn: Callable[[str], None] | None = None,
    fail_level: int = checks.ERROR,
    **check_kwargs: Any,
) -> None:
    """Run the system checks for `command`; errors stop it, warnings go to `warn` (None: unsaid).

    Raises SystemCheckError with one stamped line per error (no hint: `manage.py check` has
    them). Django prints that text as it is, so a cron log gets one line per error and no
    traceback. A command cron runs every minute passes no `warn`: it would repeat each
    warning in its log every time.
    """
    messages = [m for m in checks.run_checks(**check_kwargs) if not m.is_silenced()]
    errors = [m for m in messages if m.is_serious(fail_level)]
    if errors:
        lines = [stamp(f"{command} did not run: {one_line(m)} (manage.py check gives the hint)") for m in errors]
        raise SystemCheckError("\n".join(lines))
    if warn is not None:
        for message in messages:
            hint = f" Hint: {' '.join(str(message.hint).split())}" if message.hint else ""
            warn(stamp(f"{command}: {one_line(message)}{hint}"))
