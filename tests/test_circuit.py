"""Circuit breakers per target: a dead endpoint costs nothing once its circuit is open.

Real components: a loopback receiver that answers 503 (or 200, or 404), real ticks,
time moved with time-machine for cooldowns, and runtick processes racing for the probe.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from django.urls import reverse

from notifications.api import run_tick
from notifications.flow.breaker import BreakerSettings, breaker_errors, close, open_by_hand
from notifications.flow.targets import targets_of
from notifications.models import DeliveryAttempt, Notification, Target
from notifications.signals import target_closed, target_opened

START = datetime(2025, 3, 3, 12, 0, tzinfo=UTC)
BREAKER = {"failures": 3, "cooldown": 60, "max_cooldown": 200}


@pytest.fixture
def clock(time_machine):
    time_machine.move_to(START, tick=False)
    return time_machine


@pytest.fixture
def heard():
    log: list[tuple[str, Target]] = []

    def opened(sender, target, **kwargs):
        log.append(("opened", target))

    def closed(sender, target, **kwargs):
        log.append(("closed", target))

    target_opened.connect(opened, weak=False)
    target_closed.connect(closed, weak=False)
    yield log
    target_opened.disconnect(opened)
    target_closed.disconnect(closed)


def hooks(make_row, url: str, n: int) -> list[Notification]:
    return [make_row(channels=["webhook"], webhook_url=url) for _ in range(n)]


def key_of(server) -> str:
    return f"127.0.0.1:{server.port}"


@pytest.mark.parametrize(
    ("url", "channels", "expected"),
    [
        ("https://Hooks.Example.COM/x", ["webhook"], ["hooks.example.com"]),
        ("https://hooks.example.com:443/x", ["webhook"], ["hooks.example.com"]),
        ("http://hooks.example.com:80/x", ["webhook"], ["hooks.example.com"]),
        ("http://127.0.0.1:8081/x", ["webhook"], ["127.0.0.1:8081"]),
        ("https://user:pw@hooks.example.com:8443/x", ["webhook"], ["hooks.example.com:8443"]),
        ("https://hooks.example.com/x", ["email", "webhook"], ["email", "hooks.example.com"]),
        ("", ["email"], ["email"]),
        ("https://hooks.example.com./x", ["webhook"], ["hooks.example.com"]),  # the same receiver
        ("https://Bücher.Example:8443/x", ["webhook"], ["xn--bcher-kva.example:8443"]),  # as the request names it
    ],
)
def test_targets_are_hosts_with_a_port_only_when_it_is_not_the_default(url, channels, expected):
    row = Notification(channels=channels, webhook_url=url)
    assert targets_of(row) == expected


@pytest.mark.parametrize(
    ("value", "errors"),
    [
        ({"failures": 10, "cooldown": 60, "max_cooldown": 3600}, 0),
        ({"failures": 0}, 0),
        ({"failures": -1}, 1),
        ({"failures": 5, "cooldown": 0}, 1),
        ({"failures": 5, "cooldown": 100, "max_cooldown": 10}, 1),
        ({"failure": 5}, 1),
        ([10], 1),
    ],
)
def test_breaker_settings_are_validated(value, errors):
    assert len(breaker_errors(value)) == errors


@pytest.mark.django_db(transaction=True)
@override_settings(NOTIFICATIONS_CIRCUIT_BREAKER=BREAKER)
def test_failures_open_the_circuit_and_held_rows_cost_nothing(make_row, webhook_server, clock, heard):
    webhook_server.reply.status = 503
    url = webhook_server.url()
    hooks(make_row, url, 3)
    assert run_tick().counts()["retried"] == 3

    target = Target.objects.get(key=key_of(webhook_server))
    assert (target.state, target.failures) == ("open", 3)
    assert target.retry_at == START + timedelta(seconds=60)
    assert [name for name, _ in heard] == ["opened"]

    held = hooks(make_row, url, 5)
    report = run_tick()
    assert report.counts()["deferred"] == 5 and report.counts()["retried"] == 0
    assert len(webhook_server.received) == 3  # nothing more went out
    for row in Notification.objects.filter(pk__in=[r.pk for r in held]):
        assert (row.error_count, row.held_for, row.next_fire_at) == (0, target.key, target.retry_at)
    assert DeliveryAttempt.objects.filter(notification__in=held).count() == 0


@pytest.mark.django_db(transaction=True)
@override_settings(NOTIFICATIONS_CIRCUIT_BREAKER=BREAKER)
def test_a_target_failing_mid_batch_has_its_waiting_rows_held_in_the_same_tick(make_row, webhook_server, clock):
    webhook_server.reply.status = 503
    webhook_server.reply.delay = 0.2  # results arrive while most of the batch still waits
    rows = hooks(make_row, webhook_server.url(), 40)

    report = run_tick()

    sent = len(webhook_server.received)
    # The 3 failures that tripped it, and what the other workers (8 in all) had in flight
    # then: a worker hands back a result to the breaker before it takes its next row.
    assert 3 <= sent <= 3 + 8
    assert (report.counts()["retried"], report.counts()["deferred"]) == (sent, 40 - sent)
    target = Target.objects.get(key=key_of(webhook_server))
    assert target.state == "open"
    held = Notification.objects.filter(pk__in=[r.pk for r in rows], held_for=target.key)
    assert held.count() == 40 - sent
    assert all(row.error_count == 0 for row in held)  # no retry spent
    assert DeliveryAttempt.objects.count() == sent


@pytest.mark.django_db(transaction=True)
@override_settings(NOTIFICATIONS_CIRCUIT_BREAKER=BREAKER, NOTIFICATIONS_BACKOFF=[3600, 3600])
def test_time_held_behind_an_open_circuit_counts_toward_max_delay(make_row, webhook_server, clock):
    webhook_server.reply.status = 503
    url = webhook_server.url()
    hooks(make_row, url, 3)
    run_tick()
    urgent = make_row(channels=["webhook"], webhook_url=url, max_delay=30)
    patient = make_row(channels=["webhook"], webhook_url=url, max_delay=600)
    assert run_tick().counts()["deferred"] == 2

    clock.shift(61)
    webhook_server.reply.status = 200
    report = run_tick()

    assert (report.counts()["expired"], report.counts()["succeeded"]) == (1, 1)
    assert len(webhook_server.received) == 4  # the probe: the patient row, not the expired one
    assert Notification.objects.get(pk=urgent.pk).last_error.startswith("expired: 1 min after its due time")
    assert not Notification.objects.filter(pk=patient.pk).exists()


@pytest.mark.django_db(transaction=True)
@override_settings(NOTIFICATIONS_CIRCUIT_BREAKER=BREAKER, NOTIFICATIONS_BACKOFF=[3600, 3600])
def test_one_probe_after_the_cooldown_success_closes_and_releases(make_row, webhook_server, clock, heard):
    webhook_server.reply.status = 503
    url = webhook_server.url()
    hooks(make_row, url, 3)
    run_tick()
    hooks(make_row, url, 5)
    run_tick()  # held until retry_at

    clock.shift(61)
    webhook_server.reply.status = 200
    report = run_tick()
    assert len(webhook_server.received) == 4  # exactly one probe
    assert report.counts()["succeeded"] == 1 and report.counts()["deferred"] == 4
    target = Target.objects.get(key=key_of(webhook_server))
    assert (target.state, target.failures) == ("closed", 0)
    assert [name for name, _ in heard] == ["opened", "closed"]
    assert not Notification.objects.filter(held_for__isnull=False).exists()

    assert run_tick().counts()["succeeded"] == 4  # released rows are due at once


@pytest.mark.django_db(transaction=True)
@override_settings(NOTIFICATIONS_CIRCUIT_BREAKER=BREAKER, NOTIFICATIONS_BACKOFF=[3600, 3600])
def test_a_failed_probe_doubles_the_cooldown_up_to_the_maximum(make_row, webhook_server, clock, heard):
    webhook_server.reply.status = 503
    hooks(make_row, webhook_server.url(), 6)
    run_tick()  # 6 failures: open for 60 s
    hooks(make_row, webhook_server.url(), 5)  # held; one of them probes each time
    key = key_of(webhook_server)
    for cooldown in (120, 200, 200):
        clock.shift(Target.objects.get(key=key).cooldown + 1)
        sent = len(webhook_server.received)
        assert run_tick().counts()["retried"] == 1  # the probe
        assert len(webhook_server.received) == sent + 1
        target = Target.objects.get(key=key)
        assert (target.state, target.cooldown) == ("open", cooldown)
    assert [name for name, _ in heard] == ["opened"]  # a failed probe re-opens without a signal


@pytest.mark.django_db(transaction=True)
@override_settings(NOTIFICATIONS_CIRCUIT_BREAKER=BREAKER, NOTIFICATIONS_BACKOFF=[3600, 3600])
@pytest.mark.parametrize("state", ["open", "half_open"])
def test_a_circuit_left_by_a_clock_an_hour_fast_holds_a_correct_host_no_longer_than_its_cooldown(
    make_row, webhook_server, clock, state
):
    # A tick on a host an hour fast opened the circuit (or claimed its probe and died): its
    # retry_at was an hour past the cooldown, and correct hosts held the target that long.
    webhook_server.reply.status = 503
    url = webhook_server.url()
    hooks(make_row, url, 3)
    run_tick(now=START + timedelta(hours=1))
    key = key_of(webhook_server)
    if state == "half_open":
        Target.objects.start_probe(key, now=START + timedelta(hours=2), until=START + timedelta(hours=2, minutes=3))
    assert Target.objects.get(key=key).state == state
    webhook_server.reply.status = 200
    hooks(make_row, url, 5)

    first = run_tick()  # the correct clock: one probe, which closes the circuit
    assert (first.counts()["succeeded"], first.counts()["deferred"]) == (1, 4)
    assert Target.objects.get(key=key).state == "closed"
    assert run_tick().counts()["succeeded"] == 4  # released at once, not an hour later
    assert len(webhook_server.received) == 3 + 5


@pytest.mark.django_db(transaction=True)
@override_settings(NOTIFICATIONS_CIRCUIT_BREAKER={"failures": 3, "cooldown": 60, "max_cooldown": 3600})
def test_a_circuit_opened_by_hand_with_no_cooldown_on_record_holds_until_its_retry_at(make_row, webhook_server, clock):
    # Host code (or a fixture) may open a circuit from the documented fields alone: its
    # retry_at is the operator's word, not a fast clock's, as long as max_cooldown allows it.
    key = key_of(webhook_server)
    Target.objects.create(key=key, state="open", failures=10, opened_at=START, retry_at=START + timedelta(minutes=30))
    hooks(make_row, webhook_server.url(), 2)

    assert run_tick().counts()["deferred"] == 2  # held until the circuit's retry_at
    assert set(Notification.objects.values_list("next_fire_at", flat=True)) == {START + timedelta(minutes=30)}
    clock.shift(timedelta(minutes=29))
    assert run_tick().counts()["claimed"] == 0
    assert webhook_server.received == []

    clock.shift(timedelta(minutes=2))
    assert run_tick().counts()["succeeded"] == 1  # the probe
    assert Target.objects.get(key=key).state == "closed"


@pytest.mark.django_db(transaction=True)
@override_settings(NOTIFICATIONS_CIRCUIT_BREAKER=BREAKER)
def test_permanent_answers_end_the_streak(make_row, webhook_server):
    webhook_server.reply.status = 404
    hooks(make_row, webhook_server.url(), 5)
    assert run_tick().counts()["dead_lettered"] == 5
    assert not Target.objects.filter(state="open").exists()


@pytest.mark.django_db(transaction=True)
@override_settings(NOTIFICATIONS_CIRCUIT_BREAKER={"failures": 0})
def test_failures_zero_turns_the_breaker_off(make_row, webhook_server):
    webhook_server.reply.status = 503
    hooks(make_row, webhook_server.url(), 5)
    assert run_tick().counts()["retried"] == 5
    assert not Target.objects.exists()
    assert BreakerSettings.read().enabled is False


@pytest.mark.django_db(transaction=True)
@override_settings(NOTIFICATIONS_CIRCUIT_BREAKER=BREAKER)
def test_open_by_hand_holds_until_closed_by_hand(make_row, webhook_server, clock, heard):
    key = key_of(webhook_server)
    assert open_by_hand(key)
    hooks(make_row, webhook_server.url(), 4)
    assert run_tick().counts()["deferred"] == 4
    clock.shift(3 * 3600)
    assert run_tick().counts()["deferred"] == 4  # no probe for a circuit opened by hand
    assert close(key)
    assert run_tick().counts()["succeeded"] == 4
    assert [name for name, _ in heard] == ["opened", "closed"]


@pytest.mark.django_db(transaction=True)
@override_settings(NOTIFICATIONS_CIRCUIT_BREAKER=BREAKER)
def test_admin_lists_targets_and_acts(client, admin_user, make_row, webhook_server):
    key = key_of(webhook_server)
    open_by_hand(key)
    hooks(make_row, webhook_server.url(), 3)
    run_tick()
    client.force_login(admin_user)
    url = reverse("admin:notifications_target_changelist")
    page = client.get(url)
    assert page.status_code == 200
    assert key in page.content.decode()
    assert page.context["cl"].result_list[0].waiting == 3
    target = Target.objects.get(key=key)
    client.post(url, {"action": "close_circuit", "_selected_action": [target.pk]})
    assert Target.objects.get(key=key).state == "closed"
    assert Notification.objects.filter(held_for=key).count() == 0
    client.post(url, {"action": "open_circuit", "_selected_action": [target.pk]})
    assert Target.objects.get(key=key).state == "open"


@pytest.mark.django_db(transaction=True)
def test_the_actions_need_the_change_permission(client, webhook_server):
    target = Target.objects.create(key=key_of(webhook_server))
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    from django.contrib.auth.models import Permission

    viewer.user_permissions.add(Permission.objects.get(codename="view_target"))
    client.force_login(viewer)
    url = reverse("admin:notifications_target_changelist")
    client.post(url, {"action": "open_circuit", "_selected_action": [target.pk]})
    assert Target.objects.get(pk=target.pk).state == "closed"


@pytest.mark.multi_process(pooled={"ticks": 4})
@pytest.mark.parametrize("ticks", [2, 4])
def test_racing_ticks_send_exactly_one_probe(children, webhook_server, ticks):
    """Ticks in separate processes race for the probe of one open circuit: one wins."""
    key = key_of(webhook_server)
    now = datetime.now(UTC)
    Target.objects.create(
        key=key, state="open", failures=10, cooldown=60, opened_at=now, retry_at=now - timedelta(seconds=1)
    )
    due = now - timedelta(seconds=5)
    Notification.objects.bulk_create(
        Notification(channels=["webhook"], webhook_url=webhook_server.url(), timezone="UTC", next_fire_at=due)
        for _ in range(40)
    )
    webhook_server.reply.status = 503
    racers = [children.start("--limit", "5", settings={"NOTIFICATIONS_CIRCUIT_BREAKER": BREAKER}) for _ in range(ticks)]
    for racer in racers:
        assert racer.wait() == 0, racer.stderr
    assert len(webhook_server.received) == 1
    assert Notification.objects.count() == 40  # nothing lost
    assert Notification.objects.filter(error_count=1).count() == 1  # only the probe spent a retry
    target = Target.objects.get(key=key)
    assert (target.state, target.cooldown) == ("open", 120)


@pytest.mark.django_db(transaction=True)
@override_settings(NOTIFICATIONS_CIRCUIT_BREAKER=BREAKER)
@pytest.mark.parametrize("field", ["next_fire_at", "webhook_url"])
def test_a_held_row_edited_by_hand_is_not_moved_when_the_circuit_closes(make_row, webhook_server, clock, field):
    from notifications.services import creating

    webhook_server.reply.status = 503
    hooks(make_row, webhook_server.url(), 3)
    run_tick()  # the circuit opens
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url())
    run_tick()
    row.refresh_from_db()
    assert row.held_for == key_of(webhook_server)
    value = {"next_fire_at": START + timedelta(days=1), "webhook_url": "https://hooks.example.com/moved"}[field]
    setattr(row, field, value)
    creating.edit(row, [field], version=row.updated_at)
    due = row.next_fire_at  # as the operator left it

    close(key_of(webhook_server))

    row.refresh_from_db()
    assert (row.next_fire_at, row.held_for) == (due, None)
