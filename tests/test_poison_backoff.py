"""A row whose retry cannot even be scheduled (a `backoff` step past the calendar,
written around validation) walks to the dead letters; it never hangs the tick or keeps
the rows of its batch from being written back (which would send them again at the
lease's end)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from notifications.api import run_tick, schedule
from notifications.conf import Policy
from notifications.models import Notification
from notifications.outcomes import Kind, settle_internal_error
from tests.support.servers import Reply

pytestmark = pytest.mark.django_db(transaction=True)  # the tick's threads see committed rows

PAST_THE_CALENDAR = [1e12]  # seconds: about 31,700 years


def tick_within(seconds: float):
    """One tick in a thread of its own, so a hung tick fails the test rather than the suite."""
    reports = []

    def tick():
        try:
            reports.append(run_tick())
        finally:
            connection.close()  # this thread's connection: the test database is dropped after

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    thread.join(timeout=seconds)
    assert not thread.is_alive(), "the tick hung waiting for a row's outcome"
    return reports[0]


def test_the_internal_error_of_a_row_whose_retry_overflows_is_a_dead_letter():
    row = schedule(channels=["email"], email_to="a@example.com", subject="s", body="b")
    row.backoff = PAST_THE_CALENDAR  # in memory, as a row written around validation loads

    outcome = settle_internal_error(row, RuntimeError("boom"), timezone.now(), Policy.from_settings())

    assert outcome.kind == Kind.DEAD_LETTERED
    assert row.next_fire_at is None and row.dead_lettered_at is not None
    assert row.last_error.startswith("internal: RuntimeError: boom; no retry could be scheduled: OverflowError")


def test_a_tick_with_such_a_row_ends_and_writes_back_the_others_once(webhook_server):
    webhook_server.responder = lambda request: Reply(status=503 if request.path == "/poison" else 200)
    poison = schedule(channels=["webhook"], webhook_url=webhook_server.url("/poison"))
    Notification.objects.filter(pk=poison.pk).update(backoff=PAST_THE_CALENDAR)
    healthy = [schedule(channels=["webhook"], webhook_url=webhook_server.url(f"/ok{i}")) for i in range(3)]

    counts = tick_within(60).counts()
    assert (counts["succeeded"], counts["dead_lettered"]) == (3, 1)
    assert not Notification.objects.filter(pk__in=[r.pk for r in healthy]).exists()
    poison.refresh_from_db()
    assert poison.dead_lettered_at is not None and poison.next_fire_at is None
    # Nothing left claimed to be sent again when the lease runs out.
    assert not Notification.objects.filter(claimed_until__gt=timezone.now() - timedelta(seconds=1)).exists()
    assert [r.path for r in webhook_server.received].count("/ok0") == 1


def test_a_failure_to_tell_the_circuit_breaker_still_writes_the_row_back(webhook_server, monkeypatch):
    from notifications.flow.control import FlowControl

    def broken(self, outcome, now, targets):
        raise RuntimeError("breaker down")

    monkeypatch.setattr(FlowControl, "watch", broken)
    row = schedule(channels=["webhook"], webhook_url=webhook_server.url("/ok"))

    assert tick_within(60).counts()["succeeded"] == 1
    assert not Notification.objects.filter(pk=row.pk).exists()


def test_schedule_refuses_a_backoff_step_past_a_hundred_years():
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as refused:
        schedule(channels=["email"], email_to="a@example.com", subject="s", body="b", backoff=PAST_THE_CALENDAR)

    assert "at most 3,153,600,000 seconds" in str(refused.value.message_dict["backoff"])
