"""What operators see of flow control: open circuits and targets at their limit, in the
notifications list header, `notifications_status` and its `--json`."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from notifications.flow import breaker as circuit
from notifications.flow.ratelimit import Limit, take
from notifications.health.flow import flow_health
from notifications.models import Notification, Target, TickRun

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def ticking():
    """A tick finished a moment ago: the status command exits 0 unless flow control changes it."""
    now = timezone.now()
    TickRun.objects.create(
        started_at=now - timedelta(seconds=3), finished_at=now - timedelta(seconds=1), host="cron-1", pid=1
    )


def open_target(key: str, held: int, **fields) -> Target:
    now = timezone.now()
    target = Target.objects.create(
        key=key,
        state=Target.State.OPEN,
        failures=10,
        opened_at=now,
        retry_at=now + timedelta(seconds=60),
        cooldown=60,
        last_error="HTTP 503",
        **fields,
    )
    Notification.objects.bulk_create(
        Notification(
            channels=["webhook"], webhook_url=f"https://{key}/hook", timezone="UTC", next_fire_at=now, held_for=key
        )
        for _ in range(held)
    )
    return target


def test_nothing_held_back_says_nothing(admin_client):
    Target.objects.create(key="ok.example.com", failures=3)  # closed, with a streak: not shown
    assert flow_health().lines() == []
    page = admin_client.get(reverse("admin:notifications_notification_changelist")).content.decode()
    assert "nq-open-circuit" not in page


def test_the_list_header_shows_open_circuits_with_a_link_to_the_targets(admin_client):
    open_target("down.example.com", held=3)
    open_target("paused.example.com", held=1, manual=True)
    page = admin_client.get(reverse("admin:notifications_notification_changelist")).content.decode()
    assert "2 circuits open:" in page
    assert 'data-target="down.example.com">down.example.com (probe <time class="nq-moment"' in page
    assert "3 rows wait" in page
    assert "paused.example.com (held by hand, 1 row waits)" in page
    assert f'href="{reverse("admin:notifications_target_changelist")}" class="nq-targets-link"' in page


def test_each_held_row_names_the_circuit_holding_it(admin_client):
    open_target("down.example.com", held=1)
    Notification.objects.create(
        channels=["webhook"], webhook_url="https://up.example.com/hook", timezone="UTC", next_fire_at=timezone.now()
    )
    page = admin_client.get(reverse("admin:notifications_notification_changelist")).content.decode()
    assert page.count("held: circuit open for down.example.com") == 2  # the reason and its hover text
    assert "up.example.com" in page


def test_closing_a_circuit_clears_the_header(admin_client):
    open_target("down.example.com", held=2)
    circuit.close("down.example.com")
    page = admin_client.get(reverse("admin:notifications_notification_changelist")).content.decode()
    assert "nq-open-circuit" not in page


def test_status_lists_open_circuits_and_targets_at_their_limit(capsys, settings):
    settings.NOTIFICATIONS_RATE_LIMITS = {"hooks.example.com": "5/s,600/m", "email": "14/s"}
    open_target("down.example.com", held=2)
    take("hooks.example.com", (Limit(5, "s"), Limit(600, "m")), 5)  # the per-second bucket is empty now
    take("email", (Limit(14, "s"),), 3)  # 11 left: not at its limit

    call_command("notifications_status")
    out = capsys.readouterr().out
    assert "circuit open: down.example.com open after 10 failures, probe at " in out
    assert "; 2 rows wait" in out
    assert "at limit: hooks.example.com (5/s), next slot in 0." in out
    assert "email" not in out and "(600/m)" not in out


def test_status_json_lists_them_too(capsys, settings):
    settings.NOTIFICATIONS_RATE_LIMITS = {"hooks.example.com": "5/s"}
    open_target("down.example.com", held=2)
    take("hooks.example.com", (Limit(5, "s"),), 9)

    call_command("notifications_status", "--json")
    facts = json.loads(capsys.readouterr().out)
    (opened,) = facts["open_circuits"]
    assert opened["target"] == "down.example.com" and opened["state"] == "open" and opened["waiting"] == 2
    assert opened["failures"] == 10 and opened["last_error"] == "HTTP 503" and opened["manual"] is False
    (limited,) = facts["at_limit"]
    assert limited["target"] == "hooks.example.com" and limited["limit"] == "5/s"
    assert 0 < limited["wait_seconds"] <= 0.2 + 0.01


def test_a_bucket_that_refilled_is_no_longer_at_its_limit(settings):
    settings.NOTIFICATIONS_RATE_LIMITS = {"*": "5/s"}  # hooks.example.com's through the wildcard
    now = timezone.now()
    take("hooks.example.com", (Limit(5, "s"),), 5, now.timestamp())
    assert [a.target for a in flow_health(now).at_limit] == ["hooks.example.com"]
    assert flow_health(now + timedelta(seconds=0.3)).at_limit == []  # a token is back


def test_flow_facts_cost_two_queries_and_only_when_read(django_assert_num_queries):
    from notifications.health.queue import queue_health

    open_target("down.example.com", held=1)
    with django_assert_num_queries(2):
        health = queue_health()
    with django_assert_num_queries(2):
        assert len(health.flow.open_circuits) == 1
