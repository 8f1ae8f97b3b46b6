"""A channel blocked for good never outlives its tick (issue 45, finding 3): the send is
reported as timed out at its deadline, the summary is printed, and the `runtick` process
exits, once or (`--loop`) on SIGTERM, rather than waiting for the stuck thread."""

from __future__ import annotations

import signal

import pytest
from django.test import override_settings

from notifications.api import schedule
from notifications.models import Notification

pytestmark = pytest.mark.django_db(transaction=True)

SUPPORT = "tests.support.site_channels"
SETTINGS = {
    "NOTIFICATIONS_CHANNEL_TIMEOUT": 1,
    "NOTIFICATIONS_CHANNELS": {
        "sms": {"BACKEND": f"{SUPPORT}.SMSChannel", "OPTIONS": {}},
        "stuck": {"BACKEND": f"{SUPPORT}.BlockedChannel", "OPTIONS": {}},
    },
}
EXITS_WITHIN = 60  # seconds: generous; without the fix the process never exits


def a_row_with_a_stuck_second_channel() -> Notification:
    to = {"to": "+15551234567"}
    with override_settings(**SETTINGS):  # the parent validates the row against the same channels
        return schedule(channels=["sms", "stuck"], channel_data={"sms": to, "stuck": to})


def assert_timed_out(row: Notification) -> None:
    row.refresh_from_db()
    assert row.last_error == "partial: stuck"
    assert row.failed_channels == ["stuck"]
    # The stuck send was still running when its process ended: the row stays claimed until
    # the lease ends, so nothing sends it again beside that send.
    assert row.claim_token is not None and row.claimed_until is not None


def test_one_runtick_exits_after_its_summary(children):
    row = a_row_with_a_stuck_second_channel()
    child = children.start(settings=SETTINGS)
    assert child.wait(EXITS_WITHIN) == 0
    assert [s["partial"] for s in child.summaries()] == [1], child.stdout
    assert_timed_out(row)


def test_runtick_loop_exits_on_sigterm_with_a_send_still_stuck(children):
    row = a_row_with_a_stuck_second_channel()
    child = children.start("--loop", "1", settings=SETTINGS)
    child.wait_for_output(lambda c: any(s["partial"] for s in c.summaries()), timeout=EXITS_WITHIN)
    child.send(signal.SIGTERM)
    assert child.wait(EXITS_WITHIN) == 0
    assert "received signal" in child.stderr
    assert_timed_out(row)
