"""Channels that start a send without holding a thread (`Channel.asynchronous`, `begin`), as
the webhook's libcurl loop does: the tick starts their rows' sends up to its concurrency,
settles each row when its last send answers, and keeps the contract of every channel
(deadline, internal errors, one answer counted)."""

from __future__ import annotations

import gc

import pytest
from django.test import override_settings

from notifications.api import schedule
from notifications.models import DeliveryAttempt, Notification
from notifications.tick.engine import run_tick
from tests.support import site_channels

pytestmark = pytest.mark.django_db(transaction=True)

SUPPORT = "tests.support.site_channels"


def sms(cls: str, **entry: object) -> override_settings:
    return override_settings(NOTIFICATIONS_CHANNELS={"sms": {"BACKEND": f"{SUPPORT}.{cls}", **entry}})


@pytest.fixture(autouse=True)
def _clean_support():
    site_channels.SENT.clear()
    site_channels.MOST_PENDING.clear()
    site_channels.STARTED.clear()


@override_settings(NOTIFICATIONS_CONCURRENCY=3)
@sms("BatchAnsweringChannel")
def test_sends_in_flight_stay_within_the_concurrency_and_each_row_settles_on_its_answer():
    """The channel answers only once three sends are pending: the tick must start three rows
    without waiting for any (its workers are not held), and never a fourth before an answer."""
    rows = [schedule(channels=["sms"], channel_data={"sms": {"to": f"+1555000000{i}"}}) for i in range(9)]
    report = run_tick()
    assert report.counts()["succeeded"] == 9
    assert not Notification.objects.filter(pk__in=[row.pk for row in rows]).exists()
    assert len(site_channels.SENT) == 9
    assert max(site_channels.MOST_PENDING) == 3
    assert DeliveryAttempt.objects.filter(channel="sms", outcome="ok").count() == 9


@sms("BeginRaisingChannel")
def test_begin_raising_is_an_internal_error_and_a_second_answer_is_ignored():
    raising = schedule(channels=["sms"], channel_data={"sms": {"to": "+15550000001"}})
    twice = schedule(channels=["sms"], channel_data={"sms": {"to": "+15550000002"}})
    report = run_tick()
    raising.refresh_from_db()
    assert raising.last_error == "sms: internal: RuntimeError"  # the message (and its secret) stays out
    assert report.counts() == {**report.counts(), "retried": 1, "succeeded": 1}
    assert not Notification.objects.filter(pk=twice.pk).exists()  # the first answer, a success, counts


def test_webhook_rows_leave_the_collector_nothing_per_row(webhook_server):
    """A detached row is freed as soon as it is written back, not left in reference cycles
    for the collector: a draining tick's memory and collector time stay flat."""
    rows = 200
    for _ in range(rows):
        schedule(channels=["webhook"], webhook_url=webhook_server.url())
    gc.collect()
    gc.disable()
    try:
        report = run_tick()
        unreachable = gc.collect()
    finally:
        gc.enable()
    assert report.counts()["succeeded"] == rows
    assert unreachable < rows  # was about 50 objects a row
