"""Which rows a tick claims, in what order, and how many batches its budget allows."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail
from django.utils import timezone

from notifications.conf import app_settings
from notifications.models import Notification
from notifications.store.claims import claim
from notifications.tick.engine import run_tick

pytestmark = pytest.mark.django_db

NOW = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)


@pytest.fixture
def due_rows(make_row):
    """Five due rows created out of order; returned oldest `next_fire_at` first."""
    minutes_ago = [3, 5, 1, 4, 2]
    rows = [make_row(email_to=f"r{m}@example.com", fire_at=NOW - timedelta(minutes=m)) for m in minutes_ago]
    return sorted(rows, key=lambda r: r.next_fire_at)


def remaining(rows) -> list[int]:
    return list(Notification.objects.filter(pk__in=[r.pk for r in rows]).order_by("pk").values_list("pk", flat=True))


def test_claim_takes_the_oldest_first_up_to_the_limit(due_rows):
    before = timezone.now()
    batch = claim(NOW, 2, lease=120)
    after = timezone.now()
    token, claimed = batch.token, batch.rows

    assert [r.pk for r in claimed] == [r.pk for r in due_rows[:2]]
    # The lease runs on the database's clock (the real one), not on the tick's `now`.
    assert all(r.claim_token == token for r in claimed)
    # Between the claim's start and end, on the database's clock (a second either side for
    # its own), however long the claim took on a loaded machine.
    lease = timedelta(seconds=120)
    assert all(
        before + lease - timedelta(seconds=1) <= r.claimed_until <= after + lease + timedelta(seconds=1)
        for r in claimed
    )
    # The others are untouched.
    assert not Notification.objects.filter(pk__in=[r.pk for r in due_rows[2:]], claim_token__isnull=False).exists()


def test_ties_on_due_time_are_broken_by_id(make_row):
    rows = [make_row(fire_at=NOW - timedelta(minutes=1)) for _ in range(4)]
    claimed = claim(NOW, 3, lease=60).rows
    assert [r.pk for r in claimed] == sorted(r.pk for r in rows)[:3]


def test_limit_2_delivers_only_the_two_oldest_in_the_first_batch(due_rows):
    report = run_tick(now=NOW, limit=2, budget=0)

    assert report.batches == 1
    assert report.claimed == 2
    assert sorted(m.to[0] for m in mail.outbox) == sorted(r.email_to for r in due_rows[:2])
    assert remaining(due_rows) == sorted(r.pk for r in due_rows[2:])


def test_rows_with_a_live_claim_are_skipped_and_expired_claims_are_taken(due_rows):
    live, expired = due_rows[0], due_rows[1]
    # Leases are read on the database's clock: the real time, whatever the tick's `now`.
    wall = timezone.now()
    Notification.objects.filter(pk=live.pk).update(claim_token=uuid.uuid4(), claimed_until=wall + timedelta(minutes=5))
    Notification.objects.filter(pk=expired.pk).update(
        claim_token=uuid.uuid4(), claimed_until=wall - timedelta(seconds=1)
    )

    claimed = claim(NOW, 2, lease=60).rows

    assert [r.pk for r in claimed] == [expired.pk, due_rows[2].pk]


def test_rows_that_are_not_due_are_never_claimed(make_row):
    max_retries = app_settings.MAX_RETRIES
    future = make_row(fire_at=NOW + timedelta(seconds=1))
    parked = make_row(fire_at=NOW)
    spent = make_row(fire_at=NOW - timedelta(hours=1))
    over = make_row(fire_at=NOW - timedelta(hours=1))
    due = make_row(fire_at=NOW)
    Notification.objects.filter(pk=parked.pk).update(next_fire_at=None)
    Notification.objects.filter(pk=spent.pk).update(error_count=max_retries)
    Notification.objects.filter(pk=over.pk).update(error_count=max_retries + 2)

    report = run_tick(now=NOW)

    assert report.claimed == 1
    assert remaining([future, parked, spent, over, due]) == sorted([future.pk, parked.pk, spent.pk, over.pk])
    assert Notification.objects.get(pk=spent.pk).error_count == max_retries  # not even looked at


def test_a_row_due_exactly_now_is_claimed(make_row):
    row = make_row(fire_at=NOW)
    assert [r.pk for r in claim(NOW, 10, lease=60).rows] == [row.pk]


def test_budget_zero_claims_exactly_one_batch(due_rows):
    report = run_tick(now=NOW, limit=2, budget=0)
    assert (report.batches, report.claimed) == (1, 2)
    assert len(remaining(due_rows)) == 3


def test_generous_budget_drains_several_batches(due_rows):
    report = run_tick(now=NOW, limit=2, budget=60)

    assert report.batches == 3  # 2 + 2 + 1
    assert report.claimed == 5
    assert remaining(due_rows) == []


def test_batches_capped_below_the_limit_still_drain_the_queue(make_row, settings):
    # With 2 workers and a 2 s channel deadline, a 10 s budget caps a batch at
    # 2 * floor(10 / 2) = 10 rows, below TICK_LIMIT. A short batch is not an empty
    # queue: the tick must keep claiming while time and rows remain.
    settings.NOTIFICATIONS_CONCURRENCY = 2
    settings.NOTIFICATIONS_CHANNEL_TIMEOUT = 2
    rows = [make_row(fire_at=NOW - timedelta(seconds=i)) for i in range(25)]

    report = run_tick(now=NOW, limit=100, budget=10)

    assert report.claimed == 25
    assert report.batches >= 3
    assert remaining(rows) == []


def test_claims_are_released_after_the_write_back(make_row, webhook_server):
    webhook_server.reply.status = 503
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url(), fire_at=NOW)

    run_tick(now=NOW)

    row = Notification.objects.get(pk=row.pk)
    assert (row.claim_token, row.claimed_until) == (None, None)
    assert row.error_count == 1
