"""The fast lane behind PgBouncer in transaction pooling (issue 47).

LISTEN through such a pooler registers on a server connection the pooler hands to another
client after the statement, so notifications never reach the loop. A loop proves its fast
lane at start (its own NOTIFY must come back): when it does not, the loop says so once,
polls at NOTIFICATIONS_LOOP_POLL_INTERVAL, and its tick records say it for
`notifications_status` and the admin. NOTIFICATIONS_LISTEN_DATABASE gives the listener a
direct line while every query goes through the pooler.

The PgBouncer is the session's own (tests/conftest.py `pgbouncer`, transaction pooling on
a free loopback port).
"""

from __future__ import annotations

import io
import time

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.urls import reverse

from notifications.api import schedule
from notifications.models import TickRun
from notifications.services import wake
from tests.support.processes import through

pytestmark = pytest.mark.postgres_only

LOOP_INTERVAL = "600"  # far beyond every wait below: a delivery in time was polled or woken, not the interval
POLL = 1  # NOTIFICATIONS_LOOP_POLL_INTERVAL of the children: a silent fast lane polls this often
# Seconds: what "in time" allows. About a second on an idle machine (a few through polling);
# generous so a loaded one passes, and still far below the loop's interval. Speed is bench/'s.
PROMPT = 60.0
SILENT = "the fast lane is off"


def url(params: dict, host: str, port: int) -> str:
    return f"postgresql://{params['USER']}@{host}:{port}/{params['NAME']}"


def webhook_row(webhook_server):
    return schedule(channels=["webhook"], webhook_url=webhook_server.url())


# --- the probe, in-process ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_direct_listener_hears_its_own_probe():
    waiter = wake.open_waiter()
    try:
        assert isinstance(waiter, wake.DueListener)
        assert waiter.probe() is True
    finally:
        waiter.close()


@pytest.mark.django_db(transaction=True)
def test_a_listener_behind_pgbouncer_is_found_silent_and_the_loop_polls_at_the_setting(pgbouncer):
    through_pooler = url(connection.settings_dict, pgbouncer.host, pgbouncer.port)
    with override_settings(NOTIFICATIONS_LISTEN_DATABASE=through_pooler, NOTIFICATIONS_LOOP_POLL_INTERVAL=3):
        waiter = wake.open_waiter()

    assert isinstance(waiter, wake.Poller) and waiter.every == 3
    assert "did not come back within 1s" in waiter.fast_lane_off
    assert "NOTIFICATIONS_LISTEN_DATABASE" in waiter.fast_lane_off
    assert through_pooler not in waiter.fast_lane_off + waiter.reason  # a URL may carry a password


@pytest.mark.django_db(transaction=True)
def test_a_listen_url_straight_to_postgresql_is_heard():
    direct = url(connection.settings_dict, "127.0.0.1", int(connection.settings_dict["PORT"]))
    with override_settings(NOTIFICATIONS_LISTEN_DATABASE=direct):
        waiter = wake.open_waiter()
    try:
        assert isinstance(waiter, wake.DueListener) and waiter.where == "NOTIFICATIONS_LISTEN_DATABASE's URL"
    finally:
        waiter.close()


# --- `runtick --loop` through PgBouncer ------------------------------------------------------------


@pytest.mark.slow
def test_through_pgbouncer_the_loop_says_its_fast_lane_is_off_polls_and_the_status_and_admin_say_it(
    pgbouncer, children, webhook_server, admin_client
):
    with through(pgbouncer.database(connection.settings_dict)):
        loop = children.start("--loop", LOOP_INTERVAL, settings={"NOTIFICATIONS_LOOP_POLL_INTERVAL": POLL})
    loop.wait_for_output(lambda c: len(c.summaries()) >= 1)
    (start,) = [line for line in loop.stdout.splitlines() if "runtick --loop: one tick every" in line]
    assert f"one tick every {POLL}s ({SILENT}: its own NOTIFY did not come back within 1s" in start
    assert f"it polls every {POLL}s" in start
    assert loop.stdout.count(SILENT) == 1  # said once, not at every tick

    row = webhook_row(webhook_server)
    returned = time.monotonic()
    (received,) = webhook_server.wait_for(1, timeout=PROMPT)
    assert time.monotonic() - returned < PROMPT
    assert received.headers["webhook-id"] == f"msg_{row.firing_id}"

    assert TickRun.objects.filter(pid=loop.pid).exclude(fast_lane_off="").exists()
    out = io.StringIO()
    call_command("notifications_status", stdout=out)
    assert f"fast lane off: runtick --loop pid {loop.pid} on " in out.getvalue()
    page = admin_client.get(reverse("admin:notifications_notification_changelist")).content.decode()
    assert "nq-fast-lane-warning" in page and f"runtick --loop (pid {loop.pid} on " in page


@pytest.mark.slow
def test_with_a_direct_listen_line_the_loop_behind_pgbouncer_wakes(pgbouncer, children, webhook_server):
    direct = dict(connection.settings_dict)
    databases = {"default": pgbouncer.database(direct), "listen": direct}
    settings = {"DATABASES": databases, "NOTIFICATIONS_LISTEN_DATABASE": "listen"}
    loop = children.start("--loop", LOOP_INTERVAL, settings=settings)
    loop.wait_for_output(lambda c: len(c.summaries()) >= 1)
    assert f"one tick every {LOOP_INTERVAL}s, sooner when a row is announced due" in loop.stdout
    assert SILENT not in loop.stdout

    row = webhook_row(webhook_server)
    returned = time.monotonic()
    (received,) = webhook_server.wait_for(1, timeout=PROMPT)  # woken: the loop's interval is 600 s
    assert time.monotonic() - returned < PROMPT
    assert received.headers["webhook-id"] == f"msg_{row.firing_id}"
    assert not TickRun.objects.filter(pid=loop.pid).exclude(fast_lane_off="").exists()
