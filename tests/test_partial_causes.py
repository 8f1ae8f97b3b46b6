"""A partial failure says why: each failed channel's cause in the admin list, the change
page's summary and the `notification_partially_delivered` signal, while `last_error`
keeps exactly `partial: <channels>` (the contract)."""

from __future__ import annotations

import pytest

from notifications import signals
from notifications.api import run_tick, schedule
from tests.support.admin_forms import CHANGELIST, change_url
from tests.support.servers import Reply

pytestmark = pytest.mark.django_db


@pytest.fixture
def partial(webhook_server):
    """A row whose email went out and whose webhook got a 503."""
    webhook_server.reply = Reply(status=503)
    row = schedule(
        channels=["email", "webhook"],
        email_to="ada@example.com",
        subject="s",
        body="b",
        webhook_url=webhook_server.url(),
    )
    received = []

    def receiver(sender, notification, results, errors, **kwargs):
        received.append(errors)

    signals.notification_partially_delivered.connect(receiver)
    try:
        run_tick()
    finally:
        signals.notification_partially_delivered.disconnect(receiver)
    row.refresh_from_db()
    row.signalled = received
    return row


def test_last_error_keeps_the_contracts_words(partial):
    assert partial.last_error == "partial: webhook"


def test_the_signal_names_each_failed_channels_cause(partial):
    assert partial.signalled == [{"webhook": "webhook: HTTP 503"}]


def test_the_list_shows_the_cause_beside_the_state(admin_client, partial):
    html = admin_client.get(CHANGELIST).content.decode()

    assert "partial: webhook (webhook: HTTP 503)" in html


def test_the_change_pages_summary_names_the_cause(admin_client, partial):
    html = admin_client.get(change_url(partial)).content.decode()

    assert "webhook (<code>webhook: HTTP 503</code>) did not go out" in html
