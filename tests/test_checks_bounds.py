"""Numeric settings have an upper bound: `manage.py check` reports a huge value by the setting's
own id, and a tick run past the checks (`runtick --skip-checks`, as the cron line runs it)
reads the default instead of ending in a traceback. `NOTIFICATIONS_ATTEMPT_RETENTION_DAYS=
1_000_000` overflowed the prune's cutoff, `LOW_PRIORITY_AGING=1e300` the claim, `LEASE=1e15`
and `TICK_BUDGET=1e12` the database, `BACKOFF=[1e300]` (only W001) the write-back."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core import checks
from django.core.management import call_command
from django.test import override_settings

from notifications.conf import MAX_DELAY_SECONDS, TickSettings
from notifications.models import Notification, TickRun
from tests.support.mail_doubles import BACKEND, DOWN_TO
from tests.support.processes import parse_summary


def messages() -> list[tuple[str, str]]:
    return [(m.id, m.msg) for m in checks.run_checks() if m.id and m.id.startswith("notifications.")]


HUGE = [
    ("ATTEMPT_RETENTION_DAYS", 1_000_000, "notifications.E014", "36,500 (days: a hundred years)"),
    ("LOW_PRIORITY_AGING", 1e300, "notifications.E025", "3,153,600,000 (seconds: a hundred years)"),
    ("LEASE", 1e15, "notifications.E007", "604,800 (seconds: a week)"),
    ("TICK_BUDGET", 1e12, "notifications.E004", "86,400 (seconds: a day, as runtick --budget)"),
    ("CHANNEL_TIMEOUT", 1e9, "notifications.E003", "3,600 (seconds: an hour)"),
    ("MAX_CLOCK_OFFSET", 1e300, "notifications.E015", "3,153,600,000 (seconds: a hundred years)"),
    ("TICK_LIMIT", 10**20, "notifications.E001", "1,000,000 (rows, as runtick --limit)"),
]


@pytest.mark.parametrize(("name", "value", "message_id", "bound"), HUGE)
def test_a_huge_value_is_an_error_of_its_settings_id(name, value, message_id, bound):
    with override_settings(**{f"NOTIFICATIONS_{name}": value}):
        found = messages()

    what = "integer" if name == "TICK_LIMIT" else "number"
    assert found == [
        (message_id, f"NOTIFICATIONS_{name} must be a positive {what} no larger than {bound}, not {value!r}.")
    ]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ATTEMPT_RETENTION_DAYS", 36_500),
        ("LOW_PRIORITY_AGING", MAX_DELAY_SECONDS),
        ("TICK_BUDGET", 86_400),
        ("CHANNEL_TIMEOUT", 3_600),
        ("MAX_CLOCK_OFFSET", MAX_DELAY_SECONDS),
        ("TICK_LIMIT", 1_000_000),
    ],
)
def test_the_bound_itself_passes(name, value):
    with override_settings(**{f"NOTIFICATIONS_{name}": value}):
        assert messages() == []


def test_a_lease_at_its_bound_passes():
    with override_settings(NOTIFICATIONS_LEASE=7 * 86_400):
        assert messages() == []


def test_a_backoff_step_above_the_bound_is_an_error_not_only_a_warning():
    with override_settings(NOTIFICATIONS_BACKOFF=[1e300], NOTIFICATIONS_MAX_RETRIES=3):
        found = messages()

    assert found == [
        (
            "notifications.E006",
            "NOTIFICATIONS_BACKOFF steps must be no larger than 3,153,600,000 (seconds: a hundred years), not 1e+300.",
        )
    ]
    with override_settings(NOTIFICATIONS_BACKOFF=[60, MAX_DELAY_SECONDS], NOTIFICATIONS_MAX_RETRIES=3):
        assert messages() == []


@pytest.mark.parametrize(
    ("name", "value"),
    [("ATTEMPT_RETENTION_DAYS", 1_000_000), ("LOW_PRIORITY_AGING", 1e300), ("TICK_BUDGET", 1e12), ("LEASE", 1e15)],
)
def test_the_tick_reads_the_default_for_a_huge_value(name, value):
    with override_settings(**{f"NOTIFICATIONS_{name}": value}):
        read = TickSettings.read()
    default = TickSettings.read()
    assert read == default


def test_a_huge_backoff_step_reads_the_default():
    with override_settings(NOTIFICATIONS_BACKOFF=[1e300]):
        assert TickSettings.read().backoff == (60.0, 300.0, 1800.0)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ATTEMPT_RETENTION_DAYS", 1_000_000),
        ("LOW_PRIORITY_AGING", 1e300),
        ("LEASE", 1e15),
        ("TICK_BUDGET", 1e12),
        ("BACKOFF", [1e300]),
        ("TICK_LIMIT", 10**20),
    ],
)
def test_runtick_past_the_checks_runs_on_the_default(make_row, name, value):
    with override_settings(NOTIFICATIONS_EMAIL_BACKEND=BACKEND):
        row = make_row(email_to=DOWN_TO, priority="low")  # fails transiently: a retry with backoff
    out = StringIO()
    with override_settings(NOTIFICATIONS_EMAIL_BACKEND=BACKEND, **{f"NOTIFICATIONS_{name}": value}):
        call_command("runtick", "--skip-checks", stdout=out, stderr=StringIO())

    (summary,) = [s for s in map(parse_summary, out.getvalue().splitlines()) if s is not None]
    assert (summary["claimed"], summary["retried"]) == (1, 1)
    assert TickRun.objects.count() == 1  # the tick is recorded
    row = Notification.objects.get(pk=row.pk)
    assert row.error_count == 1
    assert row.last_error.startswith("email: ")


def test_a_huge_circuit_breaker_cooldown_is_an_error_and_the_tick_reads_the_defaults():
    from notifications.flow.breaker import BreakerSettings

    huge = {"failures": 10, "cooldown": 60, "max_cooldown": 1e300}
    with override_settings(NOTIFICATIONS_CIRCUIT_BREAKER=huge):
        found = messages()
        read = BreakerSettings.read()

    assert found == [
        (
            "notifications.E019",
            "NOTIFICATIONS_CIRCUIT_BREAKER 'max_cooldown' must be a positive number of seconds no larger than "
            "3,153,600,000, not 1e+300.",
        )
    ]
    assert read == BreakerSettings.read()  # the defaults
