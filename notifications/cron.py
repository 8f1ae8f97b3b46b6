"""The tick as a django-crontab job: `CRONJOBS = [("* * * * *", "notifications.cron.runtick", ...)]`.

django-crontab's line runs `manage.py crontab run <hash>`, which calls the job's function.
Pointing the job at `django.core.management.call_command` with `["runtick"]` would skip
the system checks (call_command does), and a tick that could not start would reach the log
as django-crontab's "Failed to complete cronjob" and a traceback. This function runs
`runtick` with its checks (errors stop it, warnings stay out of the log) and writes a
failure to start as the command's own lines, one per error, each stamped with the time,
then exits with status 1 (a bare `manage.py runtick` does too), so cron's mail or a
wrapper notices; `manage.py notifications_status` says it as well.

Give the job's line `--skip-checks` (before the redirection), so that `crontab run`
itself, which runs every check and prints every warning each minute, leaves them to
`runtick`.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError

from notifications.management.output import stamp


def runtick(*args: str) -> None:
    """`manage.py runtick *args`, system checks included. A tick that cannot start says why
    on stderr and ends the process with status 1 (`REFUSED`)."""
    try:
        call_command("runtick", *args, skip_checks=False)
    except SystemCheckError as exc:
        refused(f"{exc}")  # already one stamped line per error
    except CommandError as exc:
        refused(stamp(f"runtick did not run: {exc}"))


REFUSED = 1  # the exit status of a tick that could not start
end_process = os._exit  # a test replaces it: it would end the test run too


def refused(lines: str) -> NoReturn:
    """Write `lines` to stderr and end the process with status REFUSED. Not `sys.exit`:
    django-crontab's `crontab run` catches every exception around its job, SystemExit
    included, and would exit 0, so cron's mail and a wrapper's status would say nothing."""
    sys.stderr.write(f"{lines}\n")
    sys.stderr.flush()
    sys.stdout.flush()
    end_process(REFUSED)
