"""The admin's `requeue` and `purge` actions: effects, messages, permissions, CSRF, confirmation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.core import mail
from django.test import Client
from django.utils import timezone

from notifications import services
from notifications.api import purge, requeue, run_tick
from notifications.models import DeliveryAttempt, Notification, State
from tests.support.admin_forms import CHANGELIST, list_action, staff, texts
from tests.support.queue_states import make, one_of_each

pytestmark = pytest.mark.django_db


# --- requeue -------------------------------------------------------------------------------


def test_requeue_makes_dead_letters_due_now_with_a_clean_count(admin_client):
    dead = make("dead")
    before = timezone.now()

    response = list_action(admin_client, "requeue", [dead])

    dead.refresh_from_db()
    assert dead.state() == State.DUE
    assert dead.error_count == 0
    assert dead.dead_lettered_at is None
    assert dead.last_error is None
    assert before <= dead.next_fire_at <= timezone.now()
    assert texts(response) == ["Requeued 1 notification."]
    entry = LogEntry.objects.get()
    assert (entry.object_id, entry.action_flag) == (str(dead.pk), CHANGE)
    assert "Requeued" in entry.change_message


def test_requeue_skips_healthy_and_retrying_rows_and_says_why(admin_client):
    rows = one_of_each()
    untouched = {s: Notification.objects.get(pk=rows[s].pk) for s in ("due", "scheduled", "retrying", "parked")}

    response = list_action(admin_client, "requeue", rows.values())

    assert texts(response) == [
        "Requeued 2 notifications. 3 skipped: nothing failed (not a dead letter or partial failure). "
        "1 skipped: still retrying on its own. Partial failures resend only their failed channels."
    ]
    for state, before in untouched.items():
        after = Notification.objects.get(pk=before.pk)
        assert (after.next_fire_at, after.error_count, after.updated_at) == (
            before.next_fire_at,
            before.error_count,
            before.updated_at,
        ), state
    assert Notification.objects.get(pk=rows["dead"].pk).state() == State.DUE
    assert Notification.objects.get(pk=rows["partial"].pk).state() == State.DUE


def test_requeue_skips_a_row_a_tick_is_delivering(admin_client):
    dead = make("dead")
    Notification.objects.filter(pk=dead.pk).update(claimed_until=timezone.now() + timedelta(minutes=2))

    response = list_action(admin_client, "requeue", [dead])

    assert texts(response) == ["Requeued 0 notifications. 1 skipped: being delivered by a tick right now."]
    assert Notification.objects.get(pk=dead.pk).state() == State.DEAD


def test_partial_requeue_sends_only_the_failed_channel_on_the_next_tick(admin_client, webhook_server):
    webhook_server.reply.status = 503
    row = make("due", webhook_url=webhook_server.url())

    run_tick()  # email delivered, webhook refused: a partial failure
    row.refresh_from_db()
    assert row.state() == State.PARTIAL and row.last_error == "partial: webhook"
    assert len(mail.outbox) == 1 and len(webhook_server.received) == 1

    response = list_action(admin_client, "requeue", [row])
    assert "Requeued 1 notification" in texts(response)[0]
    row.refresh_from_db()
    assert row.owed_channels == ["webhook"]

    webhook_server.reply.status = 200
    report = run_tick()

    assert report.counts()["succeeded"] == 1
    assert len(mail.outbox) == 1  # the email is not sent twice
    assert len(webhook_server.received) == 2
    first, second = webhook_server.received
    assert first.headers["webhook-id"] == second.headers["webhook-id"]  # same firing: receivers de-duplicate
    assert not Notification.objects.filter(pk=row.pk).exists()  # a one-shot row is done
    history = DeliveryAttempt.objects.filter(notification_id=row.pk).values_list("channel", "outcome")
    assert sorted(history) == [("email", "ok"), ("webhook", "failed"), ("webhook", "ok")]


def test_requeued_partial_that_dies_again_still_owes_only_the_failed_channel(admin_client, webhook_server, settings):
    """Dead-lettering keeps the channels the firing owes, so a later requeue does not resend the email."""
    settings.NOTIFICATIONS_MAX_RETRIES = 1
    webhook_server.reply.status = 503
    row = make("due", webhook_url=webhook_server.url())
    run_tick()  # partial: email ok
    list_action(admin_client, "requeue", [row])
    run_tick()  # webhook fails again, retries exhausted: dead letter
    row.refresh_from_db()
    assert row.state() == State.DEAD
    assert row.owed_channels == ["webhook"]

    list_action(admin_client, "requeue", [row])
    webhook_server.reply.status = 200
    run_tick()

    assert len(mail.outbox) == 1
    assert [r.headers.get("webhook-id") for r in webhook_server.received].count(
        webhook_server.received[0].headers["webhook-id"]
    ) == 3
    assert not Notification.objects.filter(pk=row.pk).exists()


def test_requeued_recurring_partial_resends_the_failed_channel_and_keeps_its_schedule(admin_client, webhook_server):
    webhook_server.reply.status = 503
    row = make("due", webhook_url=webhook_server.url(), recurrence_rule="0 9 * * *")
    Notification.objects.filter(pk=row.pk).update(next_fire_at=timezone.now() - timedelta(seconds=1))
    run_tick()
    row.refresh_from_db()
    scheduled_for = row.next_fire_at
    assert row.state() == State.PARTIAL and scheduled_for > timezone.now()

    list_action(admin_client, "requeue", [row])
    webhook_server.reply.status = 200
    run_tick()

    row.refresh_from_db()
    assert len(mail.outbox) == 1 and len(webhook_server.received) == 2
    assert row.state() == State.SCHEDULED
    assert row.next_fire_at == scheduled_for  # back on the rule's next occurrence
    assert row.owed_channels == ["email", "webhook"]  # the next firing owes everything again


def test_requeued_recurring_dead_letter_fires_now_then_returns_to_its_schedule(admin_client):
    row = make("due", channels=["email"], webhook_url="", recurrence_rule="0 9 * * *")
    Notification.objects.filter(pk=row.pk).update(
        dead_lettered_at=timezone.now(), last_error="email: SMTPRecipientsRefused", next_fire_at=None
    )

    list_action(admin_client, "requeue", [row])
    report = run_tick()

    row.refresh_from_db()
    assert report.counts()["succeeded"] == 1
    assert len(mail.outbox) == 1
    assert row.state() == State.SCHEDULED
    assert row.next_fire_at > timezone.now()
    assert row.next_fire_at.hour == 9 and row.next_fire_at.minute == 0


# --- purge ------------------------------------------------------------------------------------


def test_purge_asks_for_confirmation_first(admin_client):
    rows = [make("dead"), make("partial")]
    keep = make("scheduled")

    page = admin_client.post(CHANGELIST, {"action": "purge", "_selected_action": [r.pk for r in rows]})

    assert page.status_code == 200
    html = page.content.decode()
    assert "Purge 2 notifications?" in html
    assert "These 2 notifications will be deleted" in html
    for row in rows:
        assert f'name="_selected_action" value="{row.pk}"' in html
    assert f'value="{keep.pk}"' not in html
    assert 'name="post" value="yes"' in html and "csrfmiddlewaretoken" in html
    assert Notification.objects.count() == 3  # nothing deleted yet

    done = list_action(admin_client, "purge", rows, post="yes")

    assert list(Notification.objects.values_list("pk", flat=True)) == [keep.pk]
    assert texts(done) == ["Purged 2 notifications. Their delivery history stays readable for 30 days."]
    assert set(LogEntry.objects.filter(action_flag=DELETION).values_list("object_id", flat=True)) == {
        str(r.pk) for r in rows
    }


def test_purge_keeps_the_delivery_history(admin_client, webhook_server):
    webhook_server.reply.status = 410
    row = make("due", channels=["webhook"], email_to="", webhook_url=webhook_server.url())
    run_tick()
    assert Notification.objects.get(pk=row.pk).state() == State.DEAD

    list_action(admin_client, "purge", [row], post="yes")

    assert not Notification.objects.filter(pk=row.pk).exists()
    attempt = DeliveryAttempt.objects.get(notification_id=row.pk)
    assert (attempt.error, attempt.http_status) == ("webhook: HTTP 410", 410)


def test_purge_of_rows_already_gone_says_so(admin_client):
    rows = [make("dead"), make("dead")]
    Notification.objects.filter(pk=rows[0].pk).delete()  # another operator was faster

    response = list_action(admin_client, "purge", rows, post="yes")

    assert texts(response) == [
        "Purged 1 notification. 1 skipped: already gone. Its delivery history stays readable for 30 days."
    ]


def test_delete_selected_is_replaced_by_purge(admin_client):
    make("dead")
    html = admin_client.get(CHANGELIST).content.decode()
    assert 'value="purge"' in html and 'value="requeue"' in html
    assert 'value="delete_selected"' not in html


# --- permissions and CSRF -------------------------------------------------------------------------


def test_staff_without_change_permission_cannot_requeue():
    dead = make("dead")
    client = staff("view_notification")

    page = client.get(CHANGELIST)
    assert page.status_code == 200 and 'value="requeue"' not in page.content.decode()
    response = list_action(client, "requeue", [dead])

    assert Notification.objects.get(pk=dead.pk).state() == State.DEAD
    assert not any("Requeued" in t for t in texts(response))


def test_staff_without_delete_permission_cannot_purge_even_after_confirming():
    dead = make("dead")
    client = staff("view_notification", "change_notification")

    assert 'value="purge"' not in client.get(CHANGELIST).content.decode()
    confirmation = client.post(CHANGELIST, {"action": "purge", "_selected_action": [dead.pk]}, follow=True)
    forced = list_action(client, "purge", [dead], post="yes")

    assert Notification.objects.filter(pk=dead.pk).exists()
    assert "Purge 1 notification?" not in confirmation.content.decode()
    assert "No action selected." in texts(forced)
    # The same user may requeue: change permission is enough for that.
    assert "Requeued 1 notification" in texts(list_action(client, "requeue", [dead]))[0]


def test_staff_with_delete_permission_can_purge():
    dead = make("dead")
    client = staff("view_notification", "delete_notification")
    list_action(client, "purge", [dead], post="yes")
    assert not Notification.objects.filter(pk=dead.pk).exists()


@pytest.mark.parametrize("action", ["requeue", "purge"])
def test_actions_refuse_a_post_without_a_csrf_token(admin_user, action):
    dead = make("dead")
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)

    response = client.post(CHANGELIST, {"action": action, "_selected_action": [dead.pk], "post": "yes"})

    assert response.status_code == 403
    assert Notification.objects.get(pk=dead.pk).state() == State.DEAD


def test_actions_cannot_run_from_a_get(admin_client):
    dead = make("dead")
    admin_client.get(CHANGELIST, {"action": "purge", "_selected_action": dead.pk, "post": "yes"})
    admin_client.get(CHANGELIST, {"action": "requeue", "_selected_action": dead.pk})
    assert Notification.objects.get(pk=dead.pk).state() == State.DEAD


# --- the API functions directly, as host code calls them --------------------------------------------


def test_requeue_and_purge_accept_querysets_and_lists():
    rows = [make("dead") for _ in range(3)]
    result = requeue(Notification.objects.dead())
    assert (result.changed, result.skipped) == (3, {})
    assert purge(Notification.objects.filter(pk__in=[r.pk for r in rows[:2]])) == 2
    assert purge([rows[2]]) == 1
    assert purge([]) == 0


def test_purge_deletes_in_batches(monkeypatch):
    monkeypatch.setattr(services.actions, "PURGE_BATCH", 2)  # read where purge() lives
    for _ in range(5):
        make("dead")
    assert purge(Notification.objects.all()) == 5
    assert not Notification.objects.exists()
