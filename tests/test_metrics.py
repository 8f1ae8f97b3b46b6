"""Prometheus metrics, scraped over HTTP (the test client and a live server) and by the
textfile command, parsed with prometheus_client's own parser.

Counters come from the totals the ticks keep in the database, so they add up across tick
processes and do not go down when the delivery log is pruned.
"""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
import requests
from django.core.management import call_command
from django.test.utils import override_settings
from django.utils import timezone
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from notifications import metrics
from notifications.api import run_tick, schedule
from notifications.models import DeliveryAttempt, Tally, Target
from notifications.store import prune_history
from tests.support.admin_forms import staff
from tests.support.servers import Reply

pytestmark = pytest.mark.django_db

URL = "/metrics/notifications/"
TOKEN = "scrape-token-0123456789abcdef"


def parse(text: str) -> dict[str, dict[tuple, float]]:
    """metric sample name -> {sorted label items: value}."""
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def scrape(client) -> dict[str, dict[tuple, float]]:
    response = client.get(URL)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    return parse(response.content.decode())


def delivery(samples, channel: str, outcome: str) -> float:
    return samples["notifications_deliveries_total"][(("channel", channel), ("outcome", outcome))]


def email(**fields):
    return schedule(channels=["email"], email_to="ada@example.com", subject="s", body="b", **fields)


@pytest.fixture
def traffic(webhook_server):
    """One email delivered, one webhook retried (503), one dead-lettered (410), in two ticks."""
    email()
    webhook_server.responder = lambda request: Reply(status=410 if request.path == "/gone" else 503)
    schedule(channels=["webhook"], webhook_url=webhook_server.url("/busy"))
    schedule(channels=["webhook"], webhook_url=webhook_server.url("/gone"))
    now = timezone.now()
    run_tick(now=now)
    run_tick(now=now)  # nothing due: a second tick record
    return webhook_server


def test_deliveries_by_channel_and_outcome(admin_client, traffic):
    samples = scrape(admin_client)

    assert delivery(samples, "email", "delivered") == 1
    assert delivery(samples, "webhook", "failed") == 2
    assert delivery(samples, "webhook", "dead_lettered") == 1
    assert delivery(samples, "webhook", "delivered") == 0  # every outcome is there, zero included
    assert delivery(samples, "email", "deferred") == 0
    target = f"127.0.0.1:{traffic.port}"
    by_target = samples["notifications_target_deliveries_total"]
    assert by_target[(("channel", "webhook"), ("outcome", "failed"), ("target", target))] == 2
    assert by_target[(("channel", "email"), ("outcome", "delivered"), ("target", "email"))] == 1


def test_rows_per_state_lag_and_circuits(admin_client, traffic):
    email(fire_at=timezone.now() - timedelta(seconds=90))  # due, unsent, 90 s old
    Target.objects.create(key="hooks.example.com", state=Target.State.OPEN)

    samples = scrape(admin_client)

    rows = {dict(labels)["state"]: value for labels, value in samples["notifications_rows"].items()}
    assert rows["retrying"] == 1 and rows["dead"] == 1 and rows["due"] == 1
    assert set(rows) == {
        "due",
        "scheduled",
        "retrying",
        "partial",
        "dead",
        "parked",
        "paused",
        "expired",
        "digest",
        "escalation",
    }
    assert 89 <= samples["notifications_oldest_due_seconds"][()] < 120
    assert samples["notifications_open_circuits"][()] == 1
    assert samples["notifications_last_tick_timestamp_seconds"][()] > 0


def test_nothing_due_reads_zero_lag(admin_client):
    email(fire_at=timezone.now() + timedelta(hours=1))

    assert scrape(admin_client)["notifications_oldest_due_seconds"][()] == 0


def test_tick_duration_histogram(admin_client, traffic):
    samples = scrape(admin_client)

    assert samples["notifications_tick_duration_seconds_count"][()] == 2
    assert samples["notifications_tick_duration_seconds_bucket"][(("le", "+Inf"),)] == 2
    assert samples["notifications_tick_duration_seconds_sum"][()] > 0
    histogram = samples["notifications_tick_duration_seconds_bucket"]
    buckets = sorted((float(dict(labels)["le"]), value) for labels, value in histogram.items())
    assert [value for _, value in buckets] == sorted(value for _, value in buckets)  # cumulative


def test_counters_do_not_go_down_when_the_delivery_log_is_pruned(admin_client, traffic):
    before = scrape(admin_client)["notifications_deliveries_total"]

    prune_history(timezone.now() + timedelta(days=400), retention_days=1)

    assert not DeliveryAttempt.objects.exists()
    assert scrape(admin_client)["notifications_deliveries_total"] == before


def test_counters_add_up_across_ticks(admin_client):
    for _ in range(3):
        email()
        run_tick()

    assert delivery(scrape(admin_client), "email", "delivered") == 3
    assert Tally.objects.filter(kind="delivery").count() == 1  # one row per combination, not per tick


def test_a_deferred_firing_is_counted(admin_client):
    with override_settings(NOTIFICATIONS_RATE_LIMITS={"email": "1/h"}):
        email()
        email()
        run_tick()

    samples = scrape(admin_client)
    assert delivery(samples, "email", "delivered") == 1
    assert delivery(samples, "email", "deferred") == 1


def test_labels_carry_no_secret(admin_client, webhook_server):
    webhook_server.reply = Reply(status=503)
    url = webhook_server.url("/hook/abcdefghijklmnopqrstuvwxyz0123456789?token=s3cret")
    schedule(channels=["webhook"], webhook_url=url, webhook_secret="whsec_" + "A" * 32)
    run_tick()

    text = admin_client.get(URL).content.decode()
    assert f'target="127.0.0.1:{webhook_server.port}"' in text
    for secret in ("s3cret", "token", "abcdefghijklmnop", "/hook", "whsec_"):
        assert secret not in text


# --- who may scrape ---------------------------------------------------------------------------


def test_anonymous_is_refused(client):
    assert client.get(URL).status_code == 403


def test_staff_without_the_view_permission_is_refused():
    assert staff().get(URL).status_code == 403
    assert staff("view_notification").get(URL).status_code == 200


@override_settings(NOTIFICATIONS_METRICS_TOKEN=TOKEN)
def test_a_scraper_with_the_token(client):
    assert client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert client.get(URL, headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert client.get(URL).status_code == 403


def test_a_blank_token_lets_no_bearer_in(client):
    assert client.get(URL, headers={"Authorization": "Bearer "}).status_code == 403


def test_only_get(admin_client):
    assert admin_client.post(URL).status_code == 405


@pytest.mark.django_db(transaction=True)
@override_settings(NOTIFICATIONS_METRICS_TOKEN=TOKEN)
def test_scraped_over_http_from_a_live_server(live_server):
    email()
    run_tick()

    response = requests.get(live_server.url + URL, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)

    assert response.status_code == 200
    assert delivery(parse(response.text), "email", "delivered") == 1


# --- the textfile collector and a site's own registry ----------------------------------------


def test_the_command_prints_the_text_format(traffic):
    out = StringIO()
    call_command("notifications_status", "--prometheus", stdout=out)  # exit 0 even though nothing ticks

    samples = parse(out.getvalue())
    assert delivery(samples, "email", "delivered") == 1
    assert samples["notifications_tick_duration_seconds_count"][()] == 2


def test_the_command_exits_zero_while_ticks_are_stale():
    out = StringIO()
    call_command("notifications_status", "--prometheus", stdout=out)  # no tick ever: no CommandError

    assert "notifications_rows" in out.getvalue()


def test_the_collector_in_a_sites_registry(traffic):
    collector = metrics.NotificationsCollector()
    REGISTRY.register(collector)
    try:
        assert (
            REGISTRY.get_sample_value("notifications_deliveries_total", {"channel": "email", "outcome": "delivered"})
            == 1
        )
    finally:
        REGISTRY.unregister(collector)
