"""The settings snapshot: typed values, defaults for bad ones, read once per tick and passed down."""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from unittest import mock

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from notifications import services
from notifications.channels import Firing
from notifications.channels.webhook import guard, transport
from notifications.channels.webhook.channel import BLOCKED, WebhookChannel
from notifications.checks.numbers import check_settings
from notifications.conf import LEASE_MARGIN, Defaults, Policy, TickSettings, app_settings
from notifications.health.queue import queue_health
from notifications.tick.engine import Tick, run_tick

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))  # tests.settings


def test_the_snapshot_holds_typed_values():
    current = TickSettings.read()

    assert current.limit == 100 and isinstance(current.limit, int)
    assert current.channel_timeout == 2.0 and isinstance(current.channel_timeout, float)  # 2 in tests.settings
    assert (current.concurrency, current.target_concurrency) == (8, 16)
    assert current.backoff == (60.0, 300.0, 1800.0) and all(isinstance(s, float) for s in current.backoff)
    assert current.max_retries == 3
    assert current.allowed_networks == LOOPBACK
    assert current.webhook_secrets == ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",)
    assert current.lease == 50.0 + 2 * 2.0 + LEASE_MARGIN
    assert (current.response_body_limit, current.max_payload_bytes) == (64 * 1024, 64 * 1024)
    assert (current.attempt_retention_days, current.max_clock_offset) == (30.0, 5.0)


def test_the_snapshot_is_read_when_asked_so_override_settings_works():
    with override_settings(NOTIFICATIONS_TICK_LIMIT=7, NOTIFICATIONS_BACKOFF=[1, 2.5]):
        inside = TickSettings.read()
    assert (inside.limit, inside.backoff) == (7, (1.0, 2.5))
    assert TickSettings.read().limit == 100


@pytest.mark.parametrize(
    ("name", "value", "field"),
    [
        ("TICK_LIMIT", "100", "limit"),
        ("TICK_LIMIT", 0, "limit"),
        ("TICK_LIMIT", True, "limit"),
        ("MAX_RETRIES", 2.5, "max_retries"),
        ("CHANNEL_TIMEOUT", "10s", "channel_timeout"),
        ("CHANNEL_TIMEOUT", -1, "channel_timeout"),
        ("TICK_BUDGET", None, "budget"),
        ("CONCURRENCY", 0, "concurrency"),
        ("TARGET_CONCURRENCY", "16", "target_concurrency"),
        ("BACKOFF", "60", "backoff"),
        ("BACKOFF", [], "backoff"),
        ("BACKOFF", [60, "300"], "backoff"),
        ("BACKOFF", [60, -1], "backoff"),
        ("RESPONSE_BODY_LIMIT", "64k", "response_body_limit"),
        ("ATTEMPT_RETENTION_DAYS", 0, "attempt_retention_days"),
        ("MAX_PAYLOAD_BYTES", 1.5, "max_payload_bytes"),
        ("MAX_CLOCK_OFFSET", "lots", "max_clock_offset"),
    ],
)
def test_a_bad_value_falls_back_to_its_default_and_the_checks_report_it(name, value, field):
    with override_settings(**{f"NOTIFICATIONS_{name}": value}):
        current = TickSettings.read()
        reported = [m for m in check_settings() if f"NOTIFICATIONS_{name}" in m.msg]

    default = getattr(Defaults, name)
    assert getattr(current, field) == (tuple(map(float, default)) if name == "BACKOFF" else default)
    assert reported, f"manage.py check says nothing about NOTIFICATIONS_{name}={value!r}"


@override_settings(NOTIFICATIONS_BACKOFF=[0])
def test_a_zero_backoff_step_is_kept():
    """Retrying at once works (the checks still ask for positive steps)."""
    assert TickSettings.read().backoff == (0.0,)


def test_the_lease_is_the_setting_or_derived_from_budget_and_timeout():
    with override_settings(NOTIFICATIONS_LEASE=900):
        assert TickSettings.read().lease == 900.0
    with override_settings(NOTIFICATIONS_TICK_BUDGET=20, NOTIFICATIONS_CHANNEL_TIMEOUT=5):
        assert TickSettings.read().lease == 20 + 2 * 5 + LEASE_MARGIN
    with override_settings(NOTIFICATIONS_LEASE="long"):
        assert TickSettings.read().lease == 50 + 2 * 2 + LEASE_MARGIN


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", ()),
        ("whsec_a", ("whsec_a",)),
        (["whsec_new", "", "whsec_old"], ("whsec_new", "whsec_old")),
        ([b"whsec_a"], None),
        (42, None),
    ],
)
def test_webhook_secrets_are_strings_or_none_when_malformed(value, expected):
    with override_settings(NOTIFICATIONS_WEBHOOK_SECRET=value):
        assert TickSettings.read().webhook_secrets == expected
        if expected is None:
            with pytest.raises(TypeError, match="NOTIFICATIONS_WEBHOOK_SECRET"):
                _ = app_settings.webhook_secrets
        else:
            assert app_settings.webhook_secrets == list(expected)


@override_settings(NOTIFICATIONS_WEBHOOK_SECRET=[42])
def test_a_malformed_secret_setting_is_a_channel_error_not_a_crash():
    channel = WebhookChannel()
    try:
        assert channel.site_key_error == "webhook: NOTIFICATIONS_WEBHOOK_SECRET is malformed"
    finally:
        channel.close()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["10.0.0.0/8", "not a cidr", None, "fd00::/8"], ("10.0.0.0/8", "fd00::/8")),
        ("10.0.0.0/8", ()),
        (None, ()),
    ],
)
def test_allowed_networks_are_parsed_and_bad_entries_skipped(value, expected):
    with override_settings(NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS=value):
        assert TickSettings.read().allowed_networks == tuple(ipaddress.ip_network(n) for n in expected)
        assert guard.allowed_networks() == TickSettings.read().allowed_networks


def test_policy_is_the_snapshots_retry_part():
    assert services.Policy is Policy
    with override_settings(NOTIFICATIONS_MAX_RETRIES=5, NOTIFICATIONS_BACKOFF=[10]):
        assert Policy.from_settings() == Policy(max_retries=5, backoff=(10.0,))
        assert TickSettings.read().policy == Policy.from_settings()


def test_runtick_options_replace_limit_and_budget_only():
    tick = Tick(limit=5, budget=0)
    assert (tick.settings.limit, tick.settings.budget) == (5, 0.0)
    assert tick.settings.lease == TickSettings.read().lease  # from the settings, as before
    assert tick.settings.concurrency == 8


def test_a_longer_budget_than_the_settings_gets_a_lease_that_outlives_it():
    settings = TickSettings.read()
    longer = Tick(budget=settings.budget + 600)
    assert longer.settings.lease == settings.lease + 600  # derived: it follows the budget


@override_settings(NOTIFICATIONS_LEASE=100, NOTIFICATIONS_TICK_BUDGET=50, NOTIFICATIONS_CHANNEL_TIMEOUT=10)
def test_a_lease_set_by_hand_too_short_for_the_budget_is_refused(capsys):
    assert Tick(budget=80).settings.lease == 100  # 80 + 10 < 100: it still outlives the tick
    with pytest.raises(ValueError, match=r"not longer than the budget plus the channel timeout \(100s\)"):
        Tick(budget=90)
    with pytest.raises(CommandError, match="--budget 90: a lease of 100s is not longer"):
        call_command("runtick", "--budget", "90")


@pytest.mark.parametrize("value", ["inf", "1e400", "nan", "-1"])
def test_runtick_refuses_a_budget_that_is_not_a_finite_number_of_seconds(value):
    with pytest.raises(CommandError, match="finite number of seconds"):
        call_command("runtick", "--budget", value)


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["TICK_BUDGET", "CHANNEL_TIMEOUT", "LEASE", "ATTEMPT_RETENTION_DAYS"])
def test_infinity_is_not_a_number_of_seconds_a_tick_runs_on(name, make_row):
    with override_settings(**{f"NOTIFICATIONS_{name}": float("inf")}):
        assert [m.id for m in check_settings() if m.id.startswith("notifications.E")]  # check says so
        assert run_tick().counts()["succeeded"] == 0  # and a tick runs on the default
        make_row()
        assert run_tick().counts()["succeeded"] == 1


@pytest.mark.parametrize(
    "bad",
    [
        {"NOTIFICATIONS_MAX_RETRIES": "3"},
        {"NOTIFICATIONS_MAX_RETRIES": None},
        {"NOTIFICATIONS_TICK_LIMIT": "many", "NOTIFICATIONS_CONCURRENCY": [4], "NOTIFICATIONS_LEASE": "long"},
        {"NOTIFICATIONS_CHANNEL_TIMEOUT": "2s", "NOTIFICATIONS_BACKOFF": 60, "NOTIFICATIONS_TICK_BUDGET": None},
    ],
)
def test_a_tick_runs_on_defaults_when_settings_are_bad(make_row, bad):
    make_row()
    with override_settings(**bad):
        assert run_tick().counts()["succeeded"] == 1
        assert queue_health().counts["due"] == 0  # the admin header and notifications_status too


# --- read once, passed down ---------------------------------------------------------------


def firing_of(row) -> Firing:
    return Firing(row, str(row.firing_id), timezone.now(), row.owed_channels)


def test_a_tick_reads_the_settings_once_and_connects_with_its_networks(make_row, webhook_server):
    rows = [make_row(channels=["webhook"], webhook_url=webhook_server.url()) for _ in range(3)]
    snapshots: list[TickSettings] = []
    read_settings = TickSettings.read

    def read() -> TickSettings:
        snapshots.append(read_settings())
        return snapshots[-1]

    with (
        mock.patch.object(TickSettings, "read", side_effect=read),
        mock.patch.object(ipaddress, "ip_network", wraps=ipaddress.ip_network) as parse,
        mock.patch.object(guard, "checked_addresses", wraps=guard.checked_addresses) as check,
        mock.patch.object(guard, "refusal", wraps=guard.refusal) as refusal,
    ):
        report = run_tick()

    assert report.counts()["succeeded"] == len(rows)
    assert len(snapshots) == 1
    # NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS parsed once per tick (one call per entry), not per connection.
    assert parse.call_count == len(LOOPBACK)
    # Every address checked (a name's, or the literal a connection goes to) against the snapshot's networks.
    assert refusal.call_count >= 1
    assert all(call.args[1] is snapshots[0].allowed_networks for call in refusal.call_args_list)
    assert all(call.kwargs["allowed"] is snapshots[0].allowed_networks for call in check.call_args_list)


def test_a_channel_keeps_the_networks_of_its_snapshot(make_row, webhook_server, settings):
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url())
    opened = WebhookChannel()  # loopback allowed by tests.settings
    closed = WebhookChannel(replace(TickSettings.read(), allowed_networks=()))
    settings.NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS = []  # read by neither channel any more
    try:
        assert opened.send(firing_of(row)).ok
        assert closed.send(firing_of(row)).error == BLOCKED
    finally:
        opened.close()
        closed.close()


def test_a_connection_uses_the_networks_its_deadline_carries(webhook_server, settings):
    session, watchdog = transport.new_session(), transport.Watchdog()
    try:
        with transport.deadline(5, watchdog, allowed=()), pytest.raises(guard.BlockedAddress):
            session.post(webhook_server.url(), data=b"{}")  # loopback allowed by the setting, not by the deadline
        settings.NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS = []
        with transport.deadline(5, watchdog), pytest.raises(guard.BlockedAddress):
            session.post(webhook_server.url(), data=b"{}")  # no networks given: the setting's (now none)
        with transport.deadline(5, watchdog, allowed=LOOPBACK):
            assert session.post(webhook_server.url(), data=b"{}").status_code == 200
    finally:
        session.close()
        watchdog.close()
