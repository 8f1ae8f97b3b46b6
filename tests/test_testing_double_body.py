"""`notifications.testing`: `captured.respond(200, body="hello")` is an answer with a UTF-8 body,
not a `webhook: TypeError` the tick retries; a body that is neither bytes nor str is refused
by respond() itself."""

from __future__ import annotations

import pytest

from notifications.models import DeliveryAttempt, Notification
from notifications.testing import capture_notifications

URL = "https://hooks.example.invalid/in"


@pytest.mark.parametrize("body", ["hello", "héllo ✓", b"hello", bytearray(b"hello")])
def test_a_str_or_bytes_body_is_a_success(make_row, body):
    row = make_row(channels=["webhook"], webhook_url=URL, payload={"n": 1})

    with capture_notifications() as captured:
        captured.respond(200, body=body)
        report = captured.tick()

    assert report.counts()["succeeded"] == 1
    assert report.counts()["retried"] == 0
    assert not Notification.objects.filter(pk=row.pk).exists()
    (attempt,) = DeliveryAttempt.objects.all()
    assert (attempt.outcome, attempt.error, attempt.http_status) == ("ok", "", 200)


def test_a_str_body_of_a_failure_is_a_failure_still(make_row):
    row = make_row(channels=["webhook"], webhook_url=URL, payload={"n": 1})

    with capture_notifications() as captured:
        captured.respond(503, url=URL, body="try later")
        report = captured.tick()

    assert report.counts()["retried"] == 1
    row.refresh_from_db()
    assert "TypeError" not in (row.last_error or "")
    assert "503" in row.last_error


@pytest.mark.parametrize("body", [{"ok": True}, 42, None])
def test_any_other_body_is_a_type_error_at_respond(body):
    with capture_notifications() as captured, pytest.raises(TypeError, match=r"body=\.\.\.\) must be bytes or str"):
        captured.respond(200, body=body)
