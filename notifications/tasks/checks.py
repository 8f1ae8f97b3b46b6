"""System checks of `notifications.tasks.QueueBackend`.

- W070 (Django 5.2): `TASKS` names the backend, which needs Django 6.0's `django.tasks`.
  A warning: nothing else of the app needs it (SPEC "a setting of one feature never
  stops the rest").
- E071 (Django 6.0+, through the backend's own `check()`): an OPTIONS value that is not
  what it must be.
"""

from __future__ import annotations

from typing import Any

import django
from django.conf import settings
from django.core import checks

from notifications.channels.task.deadline import MAX_TIMEOUT, timeout_of
from notifications.channels.task.retention import BACKEND_PATH

KNOWN_OPTIONS = {"MAX_RETRIES", "RESULT_RETENTION_DAYS", "TIMEOUT"}
WHOLE_NUMBERS = {"MAX_RETRIES", "RESULT_RETENTION_DAYS"}


def naming_aliases() -> list[str]:
    configured = getattr(settings, "TASKS", None)
    if not isinstance(configured, dict):
        return []
    return [a for a, entry in configured.items() if isinstance(entry, dict) and entry.get("BACKEND") == BACKEND_PATH]


@checks.register()
def needs_django_6(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    if django.VERSION >= (6, 0):
        return []
    return [
        checks.Warning(
            f"TASKS[{alias!r}] names {BACKEND_PATH}, which needs Django 6.0 or later "
            f"(this is Django {django.get_version()}): its tasks cannot be enqueued or run.",
            hint="Upgrade Django to 6.0, or remove the entry from TASKS.",
            id="notifications.W070",
        )
        for alias in naming_aliases()
    ]


def backend_options(alias: str, options: Any) -> list[checks.CheckMessage]:
    """E071 for each OPTIONS value of TASKS[alias] that is not what it must be."""
    if not isinstance(options, dict):
        return [_e071(alias, f"OPTIONS must be a dict, not {type(options).__name__}")]
    errors = [_e071(alias, f"unknown option {name!r}") for name in sorted(set(options) - KNOWN_OPTIONS, key=str)]
    for name in sorted(WHOLE_NUMBERS & set(options)):
        value = options[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            errors.append(_e071(alias, f"{name} must be a positive whole number, not {value!r}"))
    if "TIMEOUT" in options and timeout_of(options) != options["TIMEOUT"]:  # else the default
        errors.append(
            _e071(
                alias,
                f"TIMEOUT must be a number of seconds above 0, at most {MAX_TIMEOUT:g}, not {options['TIMEOUT']!r}",
            )
        )
    return errors


def _e071(alias: str, problem: str) -> checks.CheckMessage:
    return checks.Error(
        f"TASKS[{alias!r}]: {problem}.",
        hint=(
            "OPTIONS takes MAX_RETRIES (attempts before FAILED), RESULT_RETENTION_DAYS (days results "
            "are kept) and TIMEOUT (seconds a task may run)."
        ),
        id="notifications.E071",
    )
