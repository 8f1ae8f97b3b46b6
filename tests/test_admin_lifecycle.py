"""The admin's `run_now`, `pause` and `resume` actions, the `paused` and `expired` filter
values, and the change page's buttons: each action and permission, through the test client."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from notifications.models import Notification, State
from tests.support.admin_forms import CHANGELIST, change_url, list_action, staff, texts
from tests.support.queue_states import make, one_of_each

ACTIONS = ("requeue", "run_now", "pause", "resume", "purge")
PAUSED_NOTE = " Paused rows send nothing until resumed."

pytestmark = pytest.mark.django_db


def act_url(row: Notification, action: str) -> str:
    return reverse("admin:notifications_notification_act", args=[row.pk, action])


def buttons(response) -> list[str]:
    """The change page's action buttons, in page order."""
    return re.findall(r'class="button nq-act-(\w+)"', response.content.decode())


def fresh(row: Notification) -> Notification:
    return Notification.objects.get(pk=row.pk)


# --- the state filter -----------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["paused", "expired"])
def test_the_state_filter_has_paused_and_expired(admin_client, state):
    rows = {**one_of_each(), "paused": make("paused"), "expired": make("expired")}

    response = admin_client.get(CHANGELIST, {"state": state})

    html = response.content.decode()
    assert set(map(int, re.findall(r'name="_selected_action" value="(\d+)"', html))) == {rows[state].pk}
    assert f'href="?state={state}"' in html


# --- list actions ---------------------------------------------------------------------------------


def test_pause_pauses_rows_that_would_fire_and_says_what_it_skipped(admin_client):
    rows = {**one_of_each(), "paused": make("paused")}

    response = list_action(admin_client, "pause", rows.values())

    assert texts(response) == [
        "Paused 3 notifications. 3 skipped: not going to fire (parked or a dead letter): nothing to pause. "
        "1 skipped: already paused. Paused rows send nothing until resumed."
    ]
    for state in ("due", "scheduled", "retrying"):
        assert fresh(rows[state]).state() == State.PAUSED, state
    for state in ("partial", "dead", "parked"):
        assert fresh(rows[state]).paused_at is None, state
    assert LogEntry.objects.filter(action_flag=CHANGE, change_message="Paused.").count() == 3


def test_resume_resumes_paused_rows(admin_client):
    paused, scheduled = make("paused"), make("scheduled")
    due_at = paused.next_fire_at

    response = list_action(admin_client, "resume", [paused, scheduled])

    assert texts(response) == ["Resumed 1 notification. 1 skipped: not paused."]
    after = fresh(paused)
    assert (after.paused_at, after.next_fire_at) == (None, due_at)
    assert after.state() == State.SCHEDULED


def test_resume_says_missed_occurrences_are_not_sent(admin_client):
    row = make("scheduled", recurrence_rule="0 9 * * *", timezone="Europe/Berlin")
    Notification.objects.filter(pk=row.pk).update(
        paused_at=timezone.now(), next_fire_at=timezone.now() - timedelta(days=2)
    )

    response = list_action(admin_client, "resume", [row])

    assert texts(response) == [
        "Resumed 1 notification. Recurring ones continue at their next occurrence; missed occurrences are not sent."
    ]
    assert fresh(row).next_fire_at > timezone.now()


def test_run_now_makes_healthy_rows_due_and_says_why_others_were_skipped(admin_client):
    rows = {**one_of_each(), "paused": make("paused")}
    before = timezone.now()

    response = list_action(admin_client, "run_now", rows.values())

    (message,) = texts(response)
    assert message.startswith("Made 3 notifications due now. ")
    for reason in (
        "2 skipped: a dead letter or partial failure: requeue it instead.",
        "1 skipped: already due.",
        "1 skipped: paused: resume it first.",
    ):
        assert reason in message
    for state in ("scheduled", "retrying", "parked"):
        after = fresh(rows[state])
        assert before <= after.next_fire_at <= timezone.now(), state
    assert fresh(rows["dead"]).state() == State.DEAD
    assert LogEntry.objects.filter(action_flag=CHANGE, change_message="Run now: made due now.").count() == 3


def test_view_only_staff_get_none_of_the_lifecycle_actions():
    row = make("scheduled")
    client = staff("view_notification")

    html = client.get(CHANGELIST).content.decode()
    for action in ("run_now", "pause", "resume"):
        assert f'value="{action}"' not in html
        list_action(client, action, [row])
    after = fresh(row)
    assert (after.next_fire_at, after.paused_at, after.updated_at) == (row.next_fire_at, None, row.updated_at)


# --- the change page: what it says ----------------------------------------------------------------


def test_a_dead_letters_page_says_what_happened_and_offers_requeue_and_purge(admin_client):
    row = make("dead")

    response = admin_client.get(change_url(row))

    assert buttons(response) == ["requeue", "purge"]
    status = re.search(r'<p class="nq-row-status">(.*?)</p>', response.content.decode(), re.S).group(1)
    assert "<strong>Dead letter</strong>: the firing was given up <time " in status
    assert f'title="{row.dead_lettered_at:%Y-%m-%d %H:%M:%S} UTC">' in status  # the exact time on hover
    assert "<code>webhook: HTTP 410</code>" in status
    assert "It does not fire again until requeued." in status


@pytest.mark.parametrize(
    ("state", "expected", "says"),
    [
        ("scheduled", ["run_now", "pause", "purge"], "<strong>Scheduled</strong>: next firing"),
        ("due", ["pause", "purge"], "<strong>Due</strong>: it came due <time "),
        ("retrying", ["run_now", "pause", "purge"], "<strong>Retrying</strong> after 1 failed attempt; next attempt"),
        ("parked", ["run_now", "purge"], "<strong>Parked</strong>"),
        ("paused", ["resume", "purge"], "<strong>Paused</strong> <time "),
        ("partial", ["requeue", "purge"], "<strong>Partial failure</strong> <time "),
        ("expired", ["requeue", "purge"], "<strong>Expired</strong>: the firing came too late"),
    ],
)
def test_each_page_offers_the_actions_that_apply(admin_client, state, expected, says):
    response = admin_client.get(change_url(make(state)))
    assert buttons(response) == expected
    assert says in response.content.decode()


@pytest.mark.parametrize(
    ("permissions", "dead", "scheduled"),
    [
        (("view_notification",), [], []),
        (("view_notification", "change_notification"), ["requeue"], ["run_now", "pause"]),
        (("view_notification", "delete_notification"), ["purge"], ["purge"]),
    ],
    ids=["view only", "change", "delete"],
)
def test_buttons_appear_only_for_users_who_may_press_them(permissions, dead, scheduled):
    client = staff(*permissions)
    for state, expected in (("dead", dead), ("scheduled", scheduled)):
        response = client.get(change_url(make(state)))
        assert response.status_code == 200
        assert buttons(response) == expected, state
    assert "Dead letter" in client.get(change_url(make("dead"))).content.decode()  # everyone reads what happened


def test_the_add_page_has_no_buttons(admin_client):
    response = admin_client.get(CHANGELIST + "add/")
    assert response.status_code == 200 and buttons(response) == []
    assert "nq-row-status" not in response.content.decode()


# --- the change page: pressing the buttons ------------------------------------------------------------


def test_requeue_from_the_page(admin_client):
    row = make("dead")

    response = admin_client.post(act_url(row, "requeue"), follow=True)

    assert response.redirect_chain == [(change_url(row), 302)]
    assert texts(response) == ["Requeued 1 notification."]
    assert fresh(row).state() == State.DUE
    assert buttons(response) == ["pause", "purge"]  # the page as the row now stands
    assert LogEntry.objects.get(action_flag=CHANGE).object_id == str(row.pk)


@pytest.mark.parametrize(
    ("state", "action", "after", "message"),
    [
        ("scheduled", "run_now", State.DUE, "Made 1 notification due now."),
        ("scheduled", "pause", State.PAUSED, "Paused 1 notification." + PAUSED_NOTE),
        ("paused", "resume", State.SCHEDULED, "Resumed 1 notification."),
    ],
)
def test_run_now_pause_and_resume_from_the_page(admin_client, state, action, after, message):
    row = make(state)

    response = admin_client.post(act_url(row, action), follow=True)

    assert response.redirect_chain == [(change_url(row), 302)]
    assert texts(response) == [message]
    assert fresh(row).state() == after


def test_purge_from_the_page_asks_first(admin_client):
    row = make("dead")

    page = admin_client.post(act_url(row, "purge"))

    assert page.status_code == 200
    html = page.content.decode()
    assert "Purge 1 notification?" in html
    assert "This notification will be deleted and will not fire again." in html
    assert Notification.objects.filter(pk=row.pk).exists()  # nothing deleted yet

    done = admin_client.post(
        act_url(row, "purge"), {"action": "purge", "post": "yes", "_selected_action": [row.pk]}, follow=True
    )

    assert done.redirect_chain == [(CHANGELIST, 302)]
    assert texts(done) == ["Purged 1 notification. Its delivery history stays readable for 30 days."]
    assert not Notification.objects.filter(pk=row.pk).exists()
    assert LogEntry.objects.get(action_flag=DELETION).object_id == str(row.pk)


def test_a_forged_press_of_an_action_that_does_not_apply_changes_nothing_and_says_why(admin_client):
    row = make("dead")
    response = admin_client.post(act_url(row, "pause"), follow=True)
    assert texts(response) == [
        "Paused 0 notifications. 1 skipped: not going to fire (parked or a dead letter): nothing to pause."
    ]
    assert fresh(row).paused_at is None


@pytest.mark.parametrize("action", ACTIONS)
def test_view_only_staff_get_403_on_a_forged_post(action):
    row = make("paused" if action == "resume" else "dead" if action == "requeue" else "scheduled")
    before = fresh(row)
    client = staff("view_notification")

    response = client.post(act_url(row, action), {"action": action, "post": "yes", "_selected_action": [row.pk]})

    assert response.status_code == 403
    after = fresh(row)
    assert (after.next_fire_at, after.paused_at, after.updated_at) == (
        before.next_fire_at,
        before.paused_at,
        before.updated_at,
    )


def test_staff_without_delete_permission_get_403_on_purge_even_confirmed():
    row = make("dead")
    client = staff("view_notification", "change_notification")
    response = client.post(act_url(row, "purge"), {"action": "purge", "post": "yes", "_selected_action": [row.pk]})
    assert response.status_code == 403
    assert Notification.objects.filter(pk=row.pk).exists()


@pytest.mark.parametrize("action", ACTIONS)
def test_a_get_changes_nothing(admin_client, action):
    row = make("dead")
    response = admin_client.get(act_url(row, action), {"post": "yes"})
    assert response.status_code == 405
    assert fresh(row).state() == State.DEAD


@pytest.mark.parametrize("action", ACTIONS)
def test_a_post_without_a_csrf_token_is_refused(admin_user, action):
    row = make("dead")
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    response = client.post(act_url(row, action), {"post": "yes", "_selected_action": [row.pk]})
    assert response.status_code == 403
    assert fresh(row).state() == State.DEAD


def test_the_buttons_forms_carry_the_csrf_token(admin_client):
    html = admin_client.get(change_url(make("dead"))).content.decode()
    forms = re.findall(r'<form method="post" action="[^"]*/act/\w+/">(.*?)</form>', html, re.S)
    assert len(forms) == 2
    assert all('name="csrfmiddlewaretoken"' in form for form in forms)


def test_anonymous_users_are_sent_to_the_login_page(client):
    row = make("dead")
    response = client.post(act_url(row, "requeue"))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert fresh(row).state() == State.DEAD


def test_an_unknown_action_is_404(admin_client):
    assert admin_client.post(act_url(make("dead"), "delete_selected")).status_code == 404


def test_a_row_gone_meanwhile_leads_back_to_the_list(admin_client):
    row = make("dead")
    url = act_url(row, "requeue")
    Notification.objects.filter(pk=row.pk).delete()

    response = admin_client.post(url, follow=True)

    assert response.redirect_chain == [(CHANGELIST, 302)]
    assert texts(response) == [f"Notification {row.pk} no longer exists."]


def test_the_delete_link_purges_through_the_services(admin_client, monkeypatch):
    from notifications import services

    row = make("scheduled")
    purged = []
    real = services.purge
    monkeypatch.setattr(services, "purge", lambda rows: purged.append([r.pk for r in rows]) or real(rows))

    admin_client.post(change_url(row).replace("/change/", "/delete/"), {"post": "yes"})

    assert purged == [[row.pk]]
    assert not Notification.objects.filter(pk=row.pk).exists()


def test_requeue_skips_a_paused_dead_letter_until_it_is_resumed(admin_client):
    row = make("dead")
    Notification.objects.filter(pk=row.pk).update(paused_at=timezone.now())

    assert texts(list_action(admin_client, "requeue", [row])) == [
        "Requeued 0 notifications. 1 skipped: paused: resume it first."
    ]
    assert buttons(admin_client.get(change_url(row))) == ["resume", "purge"]

    list_action(admin_client, "resume", [row])
    assert fresh(row).state() == State.DEAD  # resumed, still a dead letter: requeue it now
    assert texts(list_action(admin_client, "requeue", [row])) == ["Requeued 1 notification."]
    assert fresh(row).state() == State.DUE
