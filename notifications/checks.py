"""System checks for the NOTIFICATIONS_* settings, reported by `manage.py check`.

Ids are stable: E0xx are errors that stop a tick from working as configured,
W0xx are warnings about setups that work but will surprise.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from django.core import checks

from . import validation
from .conf import app_settings


def _number(name: str, value: Any, *, integer: bool, id: str) -> list[checks.CheckMessage]:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        what = "a positive integer" if integer else "a positive number of seconds"
        return [
            checks.Error(
                f"NOTIFICATIONS_{name} must be {what}, not {value!r}.",
                hint=f"Remove NOTIFICATIONS_{name} to use the default.",
                id=id,
            )
        ]
    return []


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    errors += _number("TICK_LIMIT", app_settings.TICK_LIMIT, integer=True, id="notifications.E001")
    errors += _number("MAX_RETRIES", app_settings.MAX_RETRIES, integer=True, id="notifications.E002")
    errors += _number("CHANNEL_TIMEOUT", app_settings.CHANNEL_TIMEOUT, integer=False, id="notifications.E003")
    errors += _number("TICK_BUDGET", app_settings.TICK_BUDGET, integer=False, id="notifications.E004")
    errors += _number("CONCURRENCY", app_settings.CONCURRENCY, integer=True, id="notifications.E005")
    errors += _check_backoff()
    if app_settings.LEASE is not None:
        errors += _number("LEASE", app_settings.LEASE, integer=False, id="notifications.E007")
        errors += _check_lease()
    errors += _check_secrets()
    errors += _check_networks()
    return errors


def _check_backoff() -> list[checks.CheckMessage]:
    backoff = app_settings.BACKOFF
    valid = isinstance(backoff, (list, tuple)) and all(
        isinstance(s, (int, float)) and not isinstance(s, bool) and s > 0 for s in backoff
    )
    if not valid or not backoff:
        return [
            checks.Error(
                f"NOTIFICATIONS_BACKOFF must be a non-empty list of positive seconds, not {backoff!r}.",
                hint="For example [60, 300, 1800].",
                id="notifications.E006",
            )
        ]
    max_retries = app_settings.MAX_RETRIES
    if isinstance(max_retries, int) and len(backoff) < max_retries - 1:
        return [
            checks.Warning(
                f"NOTIFICATIONS_BACKOFF has {len(backoff)} steps but NOTIFICATIONS_MAX_RETRIES={max_retries} "
                f"needs {max_retries - 1}; the last step repeats.",
                hint="List one delay per retry.",
                id="notifications.W001",
            )
        ]
    return []


def _check_lease() -> list[checks.CheckMessage]:
    lease, budget, timeout = app_settings.LEASE, app_settings.TICK_BUDGET, app_settings.CHANNEL_TIMEOUT
    try:
        too_short = float(lease) <= float(budget) + float(timeout)
    except (TypeError, ValueError):
        return []
    if too_short:
        return [
            checks.Error(
                f"NOTIFICATIONS_LEASE ({lease}s) must be longer than NOTIFICATIONS_TICK_BUDGET plus "
                f"NOTIFICATIONS_CHANNEL_TIMEOUT ({float(budget) + float(timeout):g}s).",
                hint="A claim that expires while its tick still delivers lets a second tick send the same firing.",
                id="notifications.E008",
            )
        ]
    return []


def _check_secrets() -> list[checks.CheckMessage]:
    secret = app_settings.WEBHOOK_SECRET
    secrets = [secret] if isinstance(secret, str) else secret
    if not isinstance(secrets, (list, tuple)) or not all(isinstance(s, str) for s in secrets):
        return [
            checks.Error(
                "NOTIFICATIONS_WEBHOOK_SECRET must be a string or a list of strings.",
                id="notifications.E009",
            )
        ]
    for position, value in enumerate(s for s in secrets if s):
        problems = validation.secret_errors(value)
        if problems:
            # Never echo the secret itself.
            return [
                checks.Error(
                    f"NOTIFICATIONS_WEBHOOK_SECRET (key {position + 1}) is malformed: {problems[0]}",
                    hint='Generate one with: python -c "import base64, os; '
                    "print('whsec_' + base64.b64encode(os.urandom(32)).decode())\"",
                    id="notifications.E010",
                )
            ]
    return []


def _check_networks() -> list[checks.CheckMessage]:
    networks = app_settings.WEBHOOK_ALLOWED_NETWORKS
    if isinstance(networks, str) or not isinstance(networks, (list, tuple)):
        return [
            checks.Error(
                "NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS must be a list of CIDRs.",
                hint='For example ["127.0.0.0/8", "::1/128"].',
                id="notifications.E011",
            )
        ]
    for value in networks:
        try:
            ipaddress.ip_network(value, strict=False)
        except (ValueError, TypeError):
            return [
                checks.Error(
                    f"NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS holds {value!r}, which is not a CIDR.",
                    hint='For example "10.0.0.0/8".',
                    id="notifications.E012",
                )
            ]
    return []
