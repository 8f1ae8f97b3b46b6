"""Leases run on the database's clock, which every host shares.

A tick on a host whose clock runs 200 s ahead used to take rows another tick had claimed
(and was still sending) as soon as its own clock passed their lease: they went out twice.
Now a claim is live until the database's clock passes it, whatever the host's says.
time-machine moves Python's clock, not the database's (SQLite reads the C library's clock,
PostgreSQL the server's).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from notifications.api import run_tick
from notifications.models import Notification
from notifications.store.claims import claim

pytestmark = pytest.mark.django_db

LEASE = 120  # seconds


def test_a_tick_200_s_ahead_leaves_rows_in_flight_alone(make_row, webhook_server):
    rows = [make_row(channels=["webhook"], webhook_url=webhook_server.url(f"/in/{n}")) for n in range(10)]
    in_flight = claim(timezone.now(), 10, LEASE)  # another tick is sending these
    assert len(in_flight.rows) == 10

    with time_machine.travel(timezone.now() + timedelta(seconds=200), tick=True):
        report = run_tick()

    assert report.claimed == 0
    assert webhook_server.received == []
    assert set(Notification.objects.values_list("claim_token", flat=True)) == {in_flight.token}
    assert Notification.objects.count() == len(rows)


def test_the_lease_ends_on_the_databases_clock(make_row, webhook_server):
    make_row(channels=["webhook"], webhook_url=webhook_server.url("/in"))
    before = timezone.now()
    claim(before, 10, LEASE)

    (until,) = Notification.objects.values_list("claimed_until", flat=True)

    assert before + timedelta(seconds=LEASE - 5) < until < timezone.now() + timedelta(seconds=LEASE + 5)
    # A claim whose lease the database's clock has passed is taken again, and the row sent.
    Notification.objects.update(claimed_until=timezone.now() - timedelta(seconds=1))
    assert run_tick().counts()["succeeded"] == 1
    assert len(webhook_server.received) == 1


@pytest.mark.skipif("connection.vendor != 'mysql'", reason="MariaDB/MySQL: a session time zone")
def test_a_mariadb_session_in_another_time_zone_keeps_the_lease_in_utc(make_row, webhook_server):
    # Django stores UTC there, while CURRENT_TIMESTAMP (Django's Now()) reads the session's
    # time zone: a server in UTC+5 made every lease end five hours late.
    make_row(channels=["webhook"], webhook_url=webhook_server.url("/in"))
    with connection.cursor() as cursor:
        cursor.execute("SET time_zone = '+05:00'")
    try:
        before = timezone.now()
        claim(before, 10, LEASE)
        (until,) = Notification.objects.values_list("claimed_until", flat=True)
        assert before + timedelta(seconds=LEASE - 5) < until < timezone.now() + timedelta(seconds=LEASE + 5)
        Notification.objects.update(claimed_until=timezone.now() - timedelta(seconds=1))
        assert run_tick().counts()["succeeded"] == 1  # an expired lease is taken again
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET time_zone = SYSTEM")
