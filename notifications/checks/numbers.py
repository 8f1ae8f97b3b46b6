"""The tick's own settings: each number in its range (`notifications.conf.MAXIMUMS`), the
backoff, the lease, quiet hours, flow control and the metrics token (E001-E008, E013-E020,
E023, E025, E029, E034-E036, W001)."""

from __future__ import annotations

from typing import Any

from django.core import checks

from notifications.conf import (
    MAX_DELAY_SECONDS,
    MAXIMUMS,
    Defaults,
    app_settings,
    is_backoff,
    is_positive,
    is_usable,
    lease_too_short,
)
from notifications.rules import quiet


def _number(name: str, value: Any, *, integer: bool, id: str) -> list[checks.CheckMessage]:
    if is_usable(name, value, integer=integer):
        return []
    what = "a positive integer" if integer else "a positive number"
    if is_positive(value, integer=integer):  # too large: see conf.MAXIMUMS
        bound, unit = MAXIMUMS[name]
        what += f" no larger than {bound:,.0f} ({unit})"
    default = getattr(Defaults, name)
    hint = f"Remove NOTIFICATIONS_{name} to use the default"
    hint += f" ({default!r})." if default is not None else "."
    return [checks.Error(f"NOTIFICATIONS_{name} must be {what}, not {value!r}.", hint=hint, id=id)]


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Every NOTIFICATIONS_* value: type, range, and how the values fit together."""
    errors: list[checks.CheckMessage] = []
    errors += _number("TICK_LIMIT", app_settings.TICK_LIMIT, integer=True, id="notifications.E001")
    errors += _number("MAX_RETRIES", app_settings.MAX_RETRIES, integer=True, id="notifications.E002")
    errors += _number("CHANNEL_TIMEOUT", app_settings.CHANNEL_TIMEOUT, integer=False, id="notifications.E003")
    errors += _number("TICK_BUDGET", app_settings.TICK_BUDGET, integer=False, id="notifications.E004")
    errors += _number("CONCURRENCY", app_settings.CONCURRENCY, integer=True, id="notifications.E005")
    errors += _number("TARGET_CONCURRENCY", app_settings.TARGET_CONCURRENCY, integer=True, id="notifications.E018")
    errors += _check_backoff()
    if app_settings.LEASE is not None:
        lease_errors = _number("LEASE", app_settings.LEASE, integer=False, id="notifications.E007")
        errors += lease_errors or _check_lease()
    errors += _number("RESPONSE_BODY_LIMIT", app_settings.RESPONSE_BODY_LIMIT, integer=True, id="notifications.E013")
    errors += _number(
        "ATTEMPT_RETENTION_DAYS", app_settings.ATTEMPT_RETENTION_DAYS, integer=False, id="notifications.E014"
    )
    errors += _number("MAX_CLOCK_OFFSET", app_settings.MAX_CLOCK_OFFSET, integer=False, id="notifications.E015")
    errors += _number("MAX_PAYLOAD_BYTES", app_settings.MAX_PAYLOAD_BYTES, integer=True, id="notifications.E016")
    errors += _check_quiet_hours()
    errors += _check_flow_control()
    errors += _number("MAX_ATTACHMENT_BYTES", app_settings.MAX_ATTACHMENT_BYTES, integer=True, id="notifications.E023")
    errors += _number(
        "ATTACHMENT_BYTES_IN_FLIGHT", app_settings.ATTACHMENT_BYTES_IN_FLIGHT, integer=True, id="notifications.E029"
    )
    errors += _number("LOW_PRIORITY_AGING", app_settings.LOW_PRIORITY_AGING, integer=False, id="notifications.E025")
    errors += _number("DIGEST_MAX_ITEMS", app_settings.DIGEST_MAX_ITEMS, integer=True, id="notifications.E035")
    errors += _number("LOOP_POLL_INTERVAL", app_settings.LOOP_POLL_INTERVAL, integer=False, id="notifications.E036")
    errors += _check_metrics_token()
    return errors


def _check_metrics_token() -> list[checks.CheckMessage]:
    """A metrics token a scraper can send: visible ASCII, nothing around it.

    A WSGI server hands the Authorization header over as ISO-8859-1 text, whatever bytes
    the client sent, so a token with a character beyond ASCII never compares equal; nor
    does one with a control character (no header carries it) or with spaces around it
    (the header's value is stripped). The message never shows the token.
    """
    token = app_settings.METRICS_TOKEN
    if not token:
        return []
    if not isinstance(token, str):
        problem = f"must be a string, not {type(token).__name__}"
    elif not all(" " <= char <= "~" for char in token):
        problem = "holds a character beyond printable ASCII, which no request's Authorization header can match"
    elif token != token.strip():
        problem = "starts or ends with a space, which no request's Authorization header can match"
    else:
        return []
    return [
        checks.Error(
            f"NOTIFICATIONS_METRICS_TOKEN {problem}.",
            hint="Use a random ASCII token, e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'. "
            "Until it is fixed, only staff users may read the metrics.",
            id="notifications.E034",
        )
    ]


def _check_backoff() -> list[checks.CheckMessage]:
    backoff = app_settings.BACKOFF
    if not is_backoff(backoff):
        return [
            checks.Error(
                f"NOTIFICATIONS_BACKOFF must be a non-empty list of positive seconds, not {backoff!r}.",
                hint="For example [60, 300, 1800].",
                id="notifications.E006",
            )
        ]
    too_long = [step for step in backoff if step > MAX_DELAY_SECONDS]
    if too_long:
        _, unit = MAXIMUMS["BACKOFF"]
        return [
            checks.Error(
                f"NOTIFICATIONS_BACKOFF steps must be no larger than {MAX_DELAY_SECONDS:,} ({unit}), "
                f"not {too_long[0]!r}.",
                hint="For example [60, 300, 1800]. Until it is fixed, ticks use the default "
                f"({list(Defaults.BACKOFF)!r}).",
                id="notifications.E006",
            )
        ]
    max_retries = app_settings.MAX_RETRIES
    if is_positive(max_retries, integer=True) and len(backoff) < max_retries - 1:
        return [
            checks.Warning(
                f"NOTIFICATIONS_BACKOFF has {len(backoff)} steps but NOTIFICATIONS_MAX_RETRIES={max_retries} "
                f"needs {max_retries - 1}; the last step repeats.",
                hint="List one delay per retry.",
                id="notifications.W001",
            )
        ]
    return []


def _check_flow_control() -> list[checks.CheckMessage]:
    from notifications.flow.breaker import breaker_errors  # imported here: they read the models
    from notifications.flow.ratelimit import limit_errors

    messages: list[checks.CheckMessage] = []
    problems = breaker_errors(app_settings.CIRCUIT_BREAKER)
    if problems:
        messages.append(
            checks.Error(
                f"NOTIFICATIONS_CIRCUIT_BREAKER {problems[0]}.",
                hint='For example {"failures": 10, "cooldown": 60, "max_cooldown": 3600} (seconds), or '
                '{"failures": 0} to turn it off. Until it is fixed, ticks use those defaults.',
                id="notifications.E019",
            )
        )
    problems = limit_errors(app_settings.RATE_LIMITS)
    if problems:
        messages.append(
            checks.Error(
                f"NOTIFICATIONS_RATE_LIMITS: {problems[0]}.",
                hint='For example {"email": "14/s,50000/d", "hooks.example.com": "600/m", "*": "50/s"}. '
                "Until it is fixed, ticks send without limits.",
                id="notifications.E020",
            )
        )
    return messages


def _check_quiet_hours() -> list[checks.CheckMessage]:
    value = app_settings.QUIET_HOURS
    problems = quiet.errors(value)
    if not problems:
        return []
    return [
        checks.Error(
            f"NOTIFICATIONS_QUIET_HOURS is not a quiet window: {problems[0]}",
            hint='For example "21:00-08:00" (read in each row\'s time zone; it may wrap midnight), '
            "or blank for none. Until it is fixed, rows without quiet hours of their own have none.",
            id="notifications.E017",
        )
    ]


def _check_lease() -> list[checks.CheckMessage]:
    lease, budget, timeout = app_settings.LEASE, app_settings.TICK_BUDGET, app_settings.CHANNEL_TIMEOUT
    if not (is_usable("TICK_BUDGET", budget, integer=False) and is_usable("CHANNEL_TIMEOUT", timeout, integer=False)):
        return []  # E003/E004 already say what is wrong
    if lease_too_short(lease, budget, timeout) is None:
        return []
    return [
        checks.Error(
            f"NOTIFICATIONS_LEASE ({lease:g}s) must be longer than NOTIFICATIONS_TICK_BUDGET plus "
            f"NOTIFICATIONS_CHANNEL_TIMEOUT ({budget + timeout:g}s).",
            hint="A claim that expires while its tick still delivers lets a second tick send the same firing. "
            "Remove NOTIFICATIONS_LEASE to derive it from the budget and the timeout.",
            id="notifications.E008",
        )
    ]
