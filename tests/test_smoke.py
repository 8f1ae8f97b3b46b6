"""The delivery loop end to end on the configured database: the public API, the wall clock, both channels.

Each line of the outcome table has its own test in test_outcomes.py, each error class
in test_error_classes.py.
"""

import json

from django.core import mail

from notifications.api import run_tick, schedule
from notifications.models import Notification


def test_a_scheduled_row_is_delivered_to_both_channels_and_deleted(db, webhook_server):
    row = schedule(
        channels=["email", "webhook"],
        email_to="ada@example.com",
        subject="Hi {{ name }}",
        body="Hello {{ name }}",
        webhook_url=webhook_server.url(),
        payload={"name": "Ada"},
    )

    report = run_tick()

    assert report.counts()["succeeded"] == 1
    assert not Notification.objects.filter(pk=row.pk).exists()
    assert [m.subject for m in mail.outbox] == ["Hi Ada"]
    assert mail.outbox[0].body == "Hello Ada"
    (request,) = webhook_server.received
    assert json.loads(request.body)["payload"] == {"name": "Ada"}
