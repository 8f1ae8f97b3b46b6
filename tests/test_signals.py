"""The public signals: sent after a firing's outcome is written back, with the row and the channels' results."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import override_settings

from notifications.api import run_tick
from notifications.channels import ChannelResult
from notifications.models import Notification
from notifications.signals import notification_dead_lettered, notification_delivered, notification_partially_delivered

SIGNALS = {
    "delivered": notification_delivered,
    "partial": notification_partially_delivered,
    "dead": notification_dead_lettered,
}


@dataclass
class Heard:
    signal: str
    sender: Any
    notification: Notification
    results: list[ChannelResult]
    row_in_db: Notification | None  # the row as a receiver reads it back from the database


@pytest.fixture
def heard():
    """Every signal the app sends during the test, with what the database held at that moment."""
    log: list[Heard] = []
    receivers = {}
    for name, signal in SIGNALS.items():

        def receiver(sender, notification, results, _name=name, **kwargs):
            log.append(
                Heard(_name, sender, notification, results, Notification.objects.filter(pk=notification.pk).first())
            )

        receivers[name] = receiver
        signal.connect(receiver, weak=False)
    yield log
    for name, signal in SIGNALS.items():
        signal.disconnect(receivers[name])


def outcome_of(results: list[ChannelResult]) -> list[tuple[str, str | None]]:
    return sorted((r.channel, r.error) for r in results)


def test_a_delivered_one_shot_is_announced_after_it_is_deleted(make_row, heard):
    row = make_row(channels=["email"], email_to="ada@example.com")

    run_tick()

    assert [(h.signal, h.sender, h.notification.pk) for h in heard] == [("delivered", Notification, row.pk)]
    assert heard[0].notification.email_to == "ada@example.com"
    assert outcome_of(heard[0].results) == [("email", None)]
    assert heard[0].row_in_db is None  # written back (deleted) before the signal went out


def test_a_delivered_recurring_row_is_announced_with_its_next_occurrence(make_row, heard, webhook_server):
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url(), recurrence_rule="*/5 * * * *")
    Notification.objects.filter(pk=row.pk).update(next_fire_at=row.created_at)  # due now

    run_tick()

    assert [(h.signal, h.notification.pk) for h in heard] == [("delivered", row.pk)]
    assert outcome_of(heard[0].results) == [("webhook", None)]
    assert heard[0].results[0].http_status == 200
    in_db = heard[0].row_in_db
    assert in_db is not None
    assert in_db.next_fire_at > row.created_at
    assert in_db.last_fired_at is not None


def test_a_partial_delivery_is_announced_with_each_channels_result(make_row, heard, webhook_server):
    webhook_server.reply.status = 503
    row = make_row(channels=["email", "webhook"], webhook_url=webhook_server.url())

    run_tick()

    assert [(h.signal, h.notification.pk) for h in heard] == [("partial", row.pk)]
    assert outcome_of(heard[0].results) == [("email", None), ("webhook", "webhook: HTTP 503")]
    assert heard[0].row_in_db is not None
    assert heard[0].row_in_db.last_error == "partial: webhook"
    assert heard[0].row_in_db.next_fire_at is None


def test_a_dead_letter_is_announced_once_retries_run_out(make_row, heard, webhook_server):
    webhook_server.reply.status = 503
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url())

    with override_settings(NOTIFICATIONS_MAX_RETRIES=2, NOTIFICATIONS_BACKOFF=[0]):
        run_tick()
        assert heard == []  # a retry is not announced
        Notification.objects.filter(pk=row.pk).update(next_fire_at=row.created_at)
        run_tick()

    assert [(h.signal, h.notification.pk) for h in heard] == [("dead", row.pk)]
    assert outcome_of(heard[0].results) == [("webhook", "webhook: HTTP 503")]
    in_db = heard[0].row_in_db
    assert in_db is not None
    assert in_db.dead_lettered_at is not None
    assert in_db.error_count == 2
    assert in_db.last_error == "webhook: HTTP 503"


def test_a_permanent_failure_is_dead_lettered_and_announced_at_once(make_row, heard, webhook_server):
    webhook_server.reply.status = 410
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url())

    run_tick()

    assert [(h.signal, h.notification.pk) for h in heard] == [("dead", row.pk)]
    assert outcome_of(heard[0].results) == [("webhook", "webhook: HTTP 410")]


def test_a_receiver_that_raises_is_logged_and_the_tick_goes_on(make_row, heard, caplog):
    def broken(sender, **kwargs):
        raise RuntimeError("pager is down")

    notification_delivered.connect(broken, weak=False)
    try:
        first = make_row(email_to="first@example.com")
        second = make_row(email_to="second@example.com")
        with caplog.at_level(logging.ERROR, logger="notifications"):
            report = run_tick()
    finally:
        notification_delivered.disconnect(broken)

    assert report.counts()["succeeded"] == 2
    assert sorted(h.notification.pk for h in heard) == sorted([first.pk, second.pk])
    assert not Notification.objects.filter(pk__in=[first.pk, second.pk]).exists()
    ours = [r for r in caplog.records if r.name == "notifications" and "pager is down" in r.getMessage()]
    assert len(ours) == 2  # one line per failed delivery, from the app's logger
