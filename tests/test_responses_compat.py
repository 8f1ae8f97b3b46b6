"""Host projects often mock webhooks with `responses`: the channel must work under it."""

import json

import responses
from standardwebhooks import Webhook

from notifications.api import run_tick
from notifications.models import Notification
from tests.settings import NOTIFICATIONS_WEBHOOK_SECRET


@responses.activate
def test_a_webhook_mocked_with_responses_is_delivered_and_verifiable(make_row):
    responses.post("https://hooks.example.com/in", status=204)
    row = make_row(channels=["webhook"], webhook_url="https://hooks.example.com/in", payload={"order": 7})

    report = run_tick()

    assert report.counts()["succeeded"] == 1
    assert not Notification.objects.filter(pk=row.pk).exists()
    (call,) = responses.calls
    body = Webhook(NOTIFICATIONS_WEBHOOK_SECRET).verify(call.request.body, dict(call.request.headers))
    assert body["payload"] == {"order": 7}
    assert json.loads(call.request.body)["notification_id"] == row.pk


@responses.activate
def test_a_mocked_server_error_is_retried(make_row):
    responses.post("https://hooks.example.com/in", status=503)
    row = make_row(channels=["webhook"], webhook_url="https://hooks.example.com/in")

    run_tick()

    row.refresh_from_db()
    assert (row.error_count, row.last_error) == (1, "webhook: HTTP 503")
