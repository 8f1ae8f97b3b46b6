"""The from-scratch site channel of docs/channels.md (tests/support/slack_webhook.py), tested
as the docs test it: against a real HTTP server on 127.0.0.1 standing in for Slack."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings

from notifications.api import schedule
from notifications.models import Notification
from notifications.tick.engine import run_tick
from tests.support.servers import Reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def slack(webhook_server):
    """NOTIFICATIONS_CHANNELS["slack"] posting to a local imitation of a Slack incoming webhook."""
    webhook_server.reply = Reply(200, b"ok")
    backend = "tests.support.slack_webhook.SlackWebhookChannel"
    url = webhook_server.url("/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX")
    with override_settings(NOTIFICATIONS_CHANNELS={"slack": {"BACKEND": backend, "OPTIONS": {"url": url}}}):
        yield webhook_server


def test_posts_subject_body_and_mention(slack):
    row = schedule(channels=["slack"], channel_data={"slack": {"mention": "U024BE7LH"}}, subject="Deploy", body="done")
    assert run_tick().counts()["succeeded"] == 1
    (request,) = slack.received
    assert json.loads(request.body) == {"text": "*Deploy*\ndone <@U024BE7LH>"}
    assert not Notification.objects.filter(pk=row.pk).exists()


def test_a_refusal_is_permanent_and_says_why_without_the_url(slack):
    slack.reply = Reply(404, b"no_service")
    row = schedule(channels=["slack"], channel_data={"slack": {}}, subject="Deploy", body="done")
    run_tick()
    row.refresh_from_db()
    assert row.last_error == "slack: HTTP 404 no_service"
    assert row.dead_lettered_at is not None


def test_slack_busy_is_retried(slack):
    slack.reply = Reply(503, b"")
    row = schedule(channels=["slack"], channel_data={"slack": {}}, subject="Deploy", body="done")
    run_tick()
    row.refresh_from_db()
    assert row.error_count == 1 and row.last_error.startswith("slack: HTTP 503")


def test_a_bad_mention_is_refused_on_save(slack):
    with pytest.raises(ValidationError) as info:
        schedule(channels=["slack"], channel_data={"slack": {"mention": "<!channel>"}}, subject="x", body="y")
    assert "channel_data" in info.value.error_dict
