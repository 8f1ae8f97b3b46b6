"""Crash recovery: a tick killed with SIGKILL while holding claims loses nothing."""

from __future__ import annotations

import signal
import time

import pytest
from django.utils import timezone

from notifications.api import run_tick
from notifications.models import Notification
from tests.support.servers import Reply

ROWS = 5
# A short lease so the test waits seconds, not minutes. The system check wants
# LEASE > TICK_BUDGET + CHANNEL_TIMEOUT, so those are small too.
LEASE = 8
CHILD_SETTINGS = {
    "NOTIFICATIONS_LEASE": LEASE,
    "NOTIFICATIONS_TICK_BUDGET": 1,
    "NOTIFICATIONS_CHANNEL_TIMEOUT": 6,
}


@pytest.mark.slow
# No PgBouncer copy: the test's own ticks redeliver (connected directly), so what goes through
# the pooler is a child's claim and its death, which the next test's copy has too.
@pytest.mark.multi_process(pooled=False)
@pytest.mark.django_db(transaction=True)
def test_killed_tick_is_redelivered_after_the_lease_and_only_then(make_row, webhook_server, children):
    webhook_server.reply = Reply(behaviour="hang")  # the child is stuck mid-delivery when it dies
    rows = [make_row(channels=["webhook"], webhook_url=webhook_server.url(), payload={"n": n}) for n in range(ROWS)]
    ids = {f"msg_{row.firing_id}" for row in rows}

    child = children.start(settings=CHILD_SETTINGS)
    webhook_server.wait_for(ROWS, timeout=60)  # every row is claimed and in flight
    child.send(signal.SIGKILL)
    assert child.wait(10) == -signal.SIGKILL

    held = list(Notification.objects.filter(pk__in=[r.pk for r in rows]))
    assert len(held) == ROWS
    assert all(row.claim_token is not None for row in held)
    lease_ends = max(row.claimed_until for row in held)
    assert lease_ends > timezone.now(), "the lease ran out before the test could look: raise LEASE"

    # Before the lease expires, the next tick leaves the claimed rows alone and still
    # delivers what else is due.
    webhook_server.reply = Reply()  # the endpoint recovers
    bystander = make_row(channels=["webhook"], webhook_url=webhook_server.url())
    touched = []
    run_tick(on_outcome=lambda outcome: touched.append(outcome.row.pk))
    assert touched == [bystander.pk]
    assert timezone.now() < lease_ends, "the check above ran after the lease: raise LEASE"
    assert Notification.objects.filter(pk__in=[r.pk for r in rows], claim_token__isnull=False).count() == ROWS

    # After the lease (real time must pass: claims are compared with the clock), the next
    # tick delivers every one of them.
    time.sleep(max((lease_ends - timezone.now()).total_seconds(), 0) + 0.2)
    report = run_tick()

    assert report.counts()["succeeded"] == ROWS
    assert not Notification.objects.exists()
    arrived = webhook_server.webhook_ids()
    # The dead tick's attempt and the redelivery carry the same webhook-id, so the
    # receiver can tell they are one firing.
    assert {i: n for i, n in arrived.items() if i in ids} == dict.fromkeys(ids, 2)


@pytest.mark.slow
@pytest.mark.multi_process
@pytest.mark.django_db(transaction=True)
def test_killed_tick_rows_come_back_to_a_later_runtick_process(make_row, webhook_server, children):
    webhook_server.reply = Reply(behaviour="hang")
    rows = [make_row(channels=["webhook"], webhook_url=webhook_server.url()) for _ in range(ROWS)]

    first = children.start(settings=CHILD_SETTINGS)
    webhook_server.wait_for(ROWS, timeout=60)
    first.kill()
    webhook_server.reply = Reply()

    lease_ends = max(Notification.objects.values_list("claimed_until", flat=True))
    early = children.start(settings=CHILD_SETTINGS)
    assert early.wait(60) == 0
    if timezone.now() < lease_ends:  # a loaded machine may start the child after the lease
        assert early.summaries()[0]["claimed"] == 0  # claims of the dead tick are still live
    # Real time must pass: the dead tick's claims end only when their lease runs out.
    time.sleep(max((lease_ends - timezone.now()).total_seconds(), 0) + 0.2)
    late = children.start(settings=CHILD_SETTINGS)
    assert late.wait(60) == 0

    # Every row sent again once, by the late tick (or, on a machine too loaded to start the
    # early one inside the lease, by the early one).
    assert early.summaries()[0]["succeeded"] + late.summaries()[0]["succeeded"] == ROWS
    assert not Notification.objects.filter(pk__in=[r.pk for r in rows]).exists()
    assert sorted(webhook_server.webhook_ids().values()) == [2] * ROWS
