"""Rate limits per target, shared through the database by every tick on every host.

A loopback receiver counts arrivals per second; runtick processes drain one target
together under one limit.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from notifications.api import run_tick
from notifications.models import Notification
from notifications.ratelimit import Limit, limit_errors, parse, take


@pytest.mark.parametrize(
    ("spec", "limits"),
    [
        ("50/s", (Limit(50, "s"),)),
        ("14/s,50000/d", (Limit(14, "s"), Limit(50000, "d"))),
        (" 600 / m ", (Limit(600, "m"),)),
        ("1/h", (Limit(1, "h"),)),
    ],
)
def test_rates_parse(spec, limits):
    assert parse(spec) == limits


@pytest.mark.parametrize("spec", ["", "50", "50/w", "0/s", "-1/s", "5/s,", "x/s"])
def test_bad_rates_are_refused(spec):
    with pytest.raises(ValueError):
        parse(spec)


def test_the_setting_is_validated():
    assert limit_errors({"email": "14/s,50000/d", "hooks.example.com": "600/m", "*": "50/s"}) == []
    assert limit_errors({"Hooks.Example.com": "5/s"})
    assert limit_errors({"email": "5/week"})
    assert limit_errors(["5/s"])


@pytest.mark.django_db(transaction=True)
def test_a_bucket_bursts_n_then_refills_n_per_period():
    ten = (Limit(10, "s"),)
    t = 1_000_000.0
    assert take("a", ten, 15, t).granted == 10  # the burst
    assert take("a", ten, 15, t).granted == 0
    assert take("a", ten, 15, t + 0.5).granted == 5
    assert take("a", ten, 15, t + 10).granted == 10  # never more than the bucket holds
    assert take("b", ten, 3, t).granted == 3  # targets do not share


@pytest.mark.django_db(transaction=True)
def test_several_limits_grant_the_smallest_and_give_the_rest_back():
    limits = (Limit(10, "s"), Limit(12, "m"))
    t = 2_000_000.0
    assert take("email", limits, 20, t).granted == 10
    grant = take("email", limits, 20, t + 1)
    assert grant.granted == 2  # the per-minute bucket binds
    assert grant.rate == pytest.approx(12 / 60)
    assert take("email", (Limit(10, "s"),), 20, t + 2).granted == 10  # the per-second one got its 8 back


@pytest.mark.django_db(transaction=True)
def test_rows_over_the_limit_are_deferred_and_others_keep_full_speed(make_row, webhook_server):
    other = type(webhook_server)()
    try:
        limited = [make_row(channels=["webhook"], webhook_url=webhook_server.url()) for _ in range(8)]
        free = [make_row(channels=["webhook"], webhook_url=other.url()) for _ in range(8)]
        key = f"127.0.0.1:{webhook_server.port}"
        now = datetime.now(UTC)
        with override_settings(NOTIFICATIONS_RATE_LIMITS={key: "3/h"}):
            report = run_tick(now=now)
        counts = report.counts()
        assert counts["succeeded"] == 11 and counts["deferred"] == 5 and counts["retried"] == 0
        assert len(other.received) == 8 and len(webhook_server.received) == 3
        rows = Notification.objects.filter(pk__in=[r.pk for r in limited])
        assert all(r.error_count == 0 and r.next_fire_at > now for r in rows)
        slots = sorted(r.next_fire_at for r in rows)
        assert slots[1] - slots[0] == timedelta(hours=1 / 3)  # one slot per token
        assert not Notification.objects.filter(pk__in=[r.pk for r in free]).exists()
    finally:
        other.close()


def arrivals_per_second(server) -> list[float]:
    return sorted(server.arrived_at)


def check_spans(times: list[float], n: int, jitter: float = 0.05) -> None:
    """Over any span of T seconds at most n x (T + 1) arrivals (a little network jitter allowed)."""
    for i in range(len(times)):
        for j in range(i + 1, len(times)):
            span = max(times[j] - times[i] - jitter, 0)
            assert j - i + 1 <= n * (span + 1) + 1, (i, j, span)


@pytest.mark.parametrize("ticks", [2, 4])
def test_a_limit_holds_across_processes(children, webhook_server, ticks):
    """Ticks in separate processes share one 10/s budget; nothing is lost or sent twice."""
    key = f"127.0.0.1:{webhook_server.port}"
    due = datetime.now(UTC) - timedelta(seconds=5)
    Notification.objects.bulk_create(
        Notification(channels=["webhook"], webhook_url=webhook_server.url(), timezone="UTC", next_fire_at=due)
        for _ in range(50)
    )
    settings = {"NOTIFICATIONS_RATE_LIMITS": {key: "10/s"}}
    racers = [children.start("--budget", "10", "--limit", "20", settings=settings) for _ in range(ticks)]
    for racer in racers:
        assert racer.wait(timeout=90) == 0, racer.stderr
    assert Notification.objects.count() == 0, [r.stdout for r in racers]  # all delivered
    ids = webhook_server.webhook_ids()
    assert len(ids) == 50 and set(ids.values()) == {1}  # none twice
    times = arrivals_per_second(webhook_server)
    check_spans(times, 10)
    start = times[0]
    per_second = [sum(1 for t in times if k <= t - start < k + 1) for k in range(1, int(times[-1] - start) + 1)]
    assert max(per_second) <= 10 + 1, per_second  # after the first second's burst: the rate
