"""The delivery loop end to end on the configured database."""

from django.core import mail

from notifications.engine import run_tick
from notifications.models import Notification


def test_one_shot_email_is_sent_and_deleted(make_row):
    row = make_row(subject="Hi {{ name }}", body="Hello {{ name }}", payload={"name": "Ada"})

    report = run_tick()

    assert report.counts()["succeeded"] == 1
    assert not Notification.objects.filter(pk=row.pk).exists()
    assert [m.subject for m in mail.outbox] == ["Hi Ada"]
    assert mail.outbox[0].body == "Hello Ada"


def test_webhook_failure_is_retried(make_row, webhook_server):
    webhook_server.reply.status = 503
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url())

    report = run_tick()

    row.refresh_from_db()
    assert report.counts()["retried"] == 1
    assert row.error_count == 1
    assert row.last_error == "webhook: HTTP 503"
    assert len(webhook_server.received) == 1
