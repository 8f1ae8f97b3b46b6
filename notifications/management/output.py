"""What the app's long-running and cron-run commands write: lines a log can be read by.

Each line a command writes for the log starts with the time it was written (ISO 8601,
in `TIME_ZONE`, to the second), so `tail -f` on a cron job's log tells when each tick ran.
System checks are run the way a command run every minute wants them: errors stop it,
each on one line; warnings are shown only where a person starts the command and reads
them once (`runtick --loop`), never on every tick (`manage.py check` shows them all).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.core import checks
from django.core.management.base import BaseCommand, OutputWrapper, SystemCheckError
from django.utils import timezone

logger = logging.getLogger("notifications.tick")


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


def tick_refusals() -> list[str]:
    """The errors that stop `runtick` under this process's settings, one line each (its
    static checks, as it runs them): empty while a tick would start."""
    found = checks.run_checks(databases=[])
    return [one_line(m) for m in found if m.is_serious() and not m.is_silenced()]


class LogOutput(OutputWrapper):
    """A command's stdout or stderr that a full disk or a closed pipe cannot stop.

    `runtick --loop` runs for months with its output in a log file: when that file's
    disk fills up (ENOSPC), or the pipe to a log reader closes (EPIPE), a write fails.
    The loop must go on ticking: the failure is logged once (on the `notifications.tick`
    logger, which may well write elsewhere), lines are dropped while it lasts, and
    writing resumes by itself when it can. Each line is flushed at once, so a `tail -f`
    sees it and a failure shows at the line that met it.
    """

    def __init__(self, wrapped: OutputWrapper, name: str) -> None:
        stream: Any = wrapped._out  # the stream it wraps (Django's stubs type it as a callable)
        super().__init__(stream, wrapped.ending)
        self._style_func = wrapped._style_func
        self.name = name
        self.failing = False

    def write(self, msg: str = "", style_func: Any = None, ending: str | None = None) -> None:  # type: ignore[override]
        try:
            super().write(msg, style_func, ending)
            super().flush()
        except OSError as exc:
            if not self.failing:
                self.failing = True
                reason = os.strerror(exc.errno) if exc.errno else type(exc).__name__
                logger.error("cannot write to %s (%s): lines are dropped until it can be written", self.name, reason)
            return
        self.failing = False

    def flush(self) -> None:
        with contextlib.suppress(OSError):
            super().flush()

    def settle(self) -> None:
        """Before exit: lines the stream still holds and cannot write are dropped, so the
        interpreter's own flush at exit does not fail (it would turn a clean stop into
        exit status 120)."""
        try:
            super().flush()
        except OSError:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                stream: Any = self._out
                os.dup2(devnull, stream.fileno())
                os.close(devnull)
                stream.flush()


def with_log_output(command: BaseCommand) -> None:
    """Give `command` `LogOutput` streams (once)."""
    if not isinstance(command.stdout, LogOutput):
        command.stdout = LogOutput(command.stdout, "stdout")
    if not isinstance(command.stderr, LogOutput):
        command.stderr = LogOutput(command.stderr, "stderr")


def settle_output(command: BaseCommand) -> None:
    """Before `command` exits: see `LogOutput.settle`."""
    for stream in (command.stdout, command.stderr):
        if isinstance(stream, LogOutput):
            stream.settle()
