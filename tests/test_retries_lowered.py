"""A failing row whose retries are lowered to what it has already spent (its own
`max_retries` on the change page, or the site's `NOTIFICATIONS_MAX_RETRIES`): no tick
claims it again, so it must not wait forever unseen. An edit to such a limit is refused;
a row stranded by the site's setting says so in the admin and can be requeued."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from notifications import services
from notifications.api import requeue, run_now, run_tick, schedule
from notifications.models import Notification
from tests.support.admin_forms import change_form, change_url, list_action, texts
from tests.support.servers import Reply

pytestmark = pytest.mark.django_db


def failing_row(webhook_server, failures: int, **fields) -> Notification:
    """A one-shot webhook row after `failures` failed attempts (503), due again now."""
    webhook_server.reply = Reply(status=503)
    row = schedule(channels=["webhook"], webhook_url=webhook_server.url("/x"), **fields)
    for _ in range(failures):
        Notification.objects.filter(pk=row.pk).update(next_fire_at=timezone.now() - timedelta(seconds=1))
        run_tick()
    row.refresh_from_db()
    assert row.error_count == failures and row.dead_lettered_at is None
    Notification.objects.filter(pk=row.pk).update(next_fire_at=timezone.now() - timedelta(seconds=1))
    row.refresh_from_db()
    return row


def test_lowering_a_rows_max_retries_to_what_it_spent_is_refused(webhook_server):
    row = failing_row(webhook_server, 2, max_retries=5)

    row.max_retries = 2
    with pytest.raises(ValidationError) as refused:
        services.edit(row, ["max_retries"])

    assert "already failed 2 times" in str(refused.value.message_dict["max_retries"])
    row.refresh_from_db()
    assert row.max_retries == 5


def test_the_change_page_refuses_it_with_a_message(admin_client, webhook_server):
    row = failing_row(webhook_server, 2, max_retries=5)

    response = admin_client.post(change_url(row), change_form(row, max_retries="2"))

    assert response.status_code == 200
    assert "already failed 2 times" in response.content.decode()
    row.refresh_from_db()
    assert row.max_retries == 5


def test_raising_it_above_what_was_spent_gives_the_row_its_next_attempt(webhook_server):
    row = failing_row(webhook_server, 2, max_retries=5)
    row.max_retries = 3
    services.edit(row, ["max_retries"])
    webhook_server.reply = Reply(status=200)
    Notification.objects.filter(pk=row.pk).update(next_fire_at=timezone.now() - timedelta(seconds=1))

    assert "succeeded=1" in run_tick().summary()
    assert not Notification.objects.filter(pk=row.pk).exists()


def test_a_row_stranded_by_a_lower_site_setting_is_requeued_and_delivered(admin_client, webhook_server, settings):
    row = failing_row(webhook_server, 2)  # the site's default: 3 attempts
    settings.NOTIFICATIONS_MAX_RETRIES = 2

    assert "claimed=0" in run_tick().summary()  # the contract's claim: error_count < MAX_RETRIES
    page = admin_client.get(change_url(row)).content.decode()
    assert "its retries were lowered to what it had spent" in page

    assert texts(list_action(admin_client, "requeue", [row])) == ["Requeued 1 notification."]
    row.refresh_from_db()
    assert (row.error_count, row.dead_lettered_at) == (0, None)
    webhook_server.reply = Reply(status=200)
    assert "succeeded=1" in run_tick().summary()
    assert not Notification.objects.filter(pk=row.pk).exists()


def test_run_now_on_a_stranded_row_says_to_requeue_it(admin_client, webhook_server, settings):
    row = failing_row(webhook_server, 2)
    settings.NOTIFICATIONS_MAX_RETRIES = 2

    response = list_action(admin_client, "run_now", [row])

    assert "its retries are used up (the limit was lowered): requeue it instead" in " ".join(texts(response))
    assert run_now(row).next_fire_at == row.next_fire_at  # left as it was


def test_a_row_still_retrying_is_not_requeued(webhook_server):
    row = failing_row(webhook_server, 1)

    result = requeue([row])

    assert result.changed == 0 and result.skipped == {"still retrying on its own": 1}
