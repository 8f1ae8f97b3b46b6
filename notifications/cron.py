"""The tick as a django-crontab job: `CRONJOBS = [("* * * * *", "notifications.cron.runtick", ...)]`.

django-crontab's line runs `manage.py crontab run <hash>`, which calls the job's function.
Pointing the job at `django.core.management.call_command` with `["runtick"]` would skip
the system checks (call_command does), and a tick that could not start would reach the log
as django-crontab's "Failed to complete cronjob" and a traceback. This function runs
`runtick` with its checks (errors stop it, warnings stay out of the log) and writes a
failure to start as the command's own lines, one per error, each stamped with the time.

Give the job's line `--skip-checks` (before the redirection), so that `crontab run`
itself, which runs every check and prints every warning each minute, leaves them to
`runtick`.
"""

from __future__ import annotations

import sys

from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError

from notifications.management.output import stamp


def runtick(*args: str) -> None:
    """`manage.py runtick *args`, system checks included; a tick that cannot start says why on stderr."""
    try:
        call_command("runtick", *args, skip_checks=False)
    except SystemCheckError as exc:
        sys.stderr.write(f"{exc}\n")  # already one stamped line per error
    except CommandError as exc:
        sys.stderr.write(stamp(f"runtick did not run: {exc}") + "\n")
