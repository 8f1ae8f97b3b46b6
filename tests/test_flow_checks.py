"""System checks of the flow-control settings (E019, E020): exact messages and hints."""

from __future__ import annotations

from django.test import override_settings

from notifications.checks.numbers import check_settings


def ids(messages) -> list[str]:
    return [m.id for m in messages]


def test_the_defaults_pass():
    assert not {"notifications.E019", "notifications.E020"} & set(ids(check_settings()))


@override_settings(NOTIFICATIONS_CIRCUIT_BREAKER={"failures": 10, "cooldown": 100, "max_cooldown": 10})
def test_a_bad_breaker_is_e019():
    [error] = [m for m in check_settings() if m.id == "notifications.E019"]
    assert error.msg == "NOTIFICATIONS_CIRCUIT_BREAKER 'max_cooldown' must not be shorter than 'cooldown'."
    assert '{"failures": 0}' in error.hint


@override_settings(NOTIFICATIONS_RATE_LIMITS={"email": "14/week"})
def test_a_bad_rate_is_e020():
    [error] = [m for m in check_settings() if m.id == "notifications.E020"]
    assert error.msg == "NOTIFICATIONS_RATE_LIMITS: email: '14/week' is not N/s, N/m, N/h or N/d with N >= 1."
    assert "600/m" in error.hint


@override_settings(
    NOTIFICATIONS_RATE_LIMITS={"email": "14/s", "*": "50/s"}, NOTIFICATIONS_CIRCUIT_BREAKER={"failures": 0}
)
def test_good_values_pass_and_are_known_settings():
    assert not {"notifications.E019", "notifications.E020", "notifications.W005"} & set(ids(check_settings()))
