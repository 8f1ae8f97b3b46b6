"""An operator's edit in the admin never races a firing (issue 24).

A firing's write-back is fenced by its claim, not by what an operator saved meanwhile: an
edit saved while the row was in flight was deleted by that firing's success, and an edit
begun before a firing wrote its old due time back over the schedule the firing moved on.
Both are refused now, with a message saying why, and nothing the tick did is undone.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from notifications.api import run_tick, schedule
from notifications.models import Notification
from notifications.services.creating import EDIT_IN_FLIGHT, EDIT_STALE
from tests.support.admin_forms import change_form, change_url
from tests.support.servers import HeldTick


@pytest.fixture
def slow_deadline(settings):
    settings.NOTIFICATIONS_CHANNEL_TIMEOUT = 30  # the held request must not time out


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_deadline")
def test_an_edit_saved_while_the_row_is_in_flight_is_refused(webhook_server, admin_client):
    row = schedule(channels=["webhook"], webhook_url=webhook_server.url("/old"), payload={"order": 7})
    page = admin_client.get(change_url(row))
    assert page.status_code == 200
    tick = HeldTick(webhook_server, 200)

    response = admin_client.post(change_url(row), change_form(row, payload='{"order": 8}'))

    assert response.status_code == 200  # the form again, not a redirect to the list
    assert EDIT_IN_FLIGHT in response.content.decode()
    assert Notification.objects.get(pk=row.pk).payload == {"order": 7}
    tick.finish()
    # The firing that was out went through: a one-shot row is done, and the operator, told
    # so, did not see an edit vanish with it.
    assert not Notification.objects.filter(pk=row.pk).exists()
    assert [r.path for r in webhook_server.received] == ["/old"]


@pytest.mark.django_db
def test_an_edit_begun_before_a_firing_does_not_undo_its_schedule(webhook_server, admin_client):
    """The page still shows today's 09:00; the tick fired it and moved it to tomorrow. Saving
    the page as it was loaded would put 09:00 back, and the row would fire twice."""
    row = schedule(
        channels=["webhook"],
        webhook_url=webhook_server.url("/daily"),
        recurrence_rule="0 9 * * *",
        fire_at=timezone.now() - timedelta(minutes=1),
    )
    loaded = Notification.objects.get(pk=row.pk)  # what the operator's page shows
    assert run_tick().counts()["succeeded"] == 1
    moved_to = Notification.objects.get(pk=row.pk).next_fire_at
    assert moved_to > timezone.now()

    response = admin_client.post(change_url(row), change_form(loaded, payload='{"note": "edited"}'))

    assert response.status_code == 200
    assert EDIT_STALE in response.content.decode()
    stored = Notification.objects.get(pk=row.pk)
    assert (stored.next_fire_at, stored.payload) == (moved_to, {})
    assert run_tick().counts()["claimed"] == 0  # nothing fires a second time
    assert len(webhook_server.received) == 1

    # Reloaded, the page carries the row as it is now, and the edit goes through.
    fresh = Notification.objects.get(pk=row.pk)
    response = admin_client.post(change_url(row), change_form(fresh, payload='{"note": "edited"}'))
    assert response.status_code == 302
    stored = Notification.objects.get(pk=row.pk)
    assert (stored.next_fire_at, stored.payload) == (moved_to, {"note": "edited"})


@pytest.mark.django_db
def test_the_change_page_carries_the_rows_version(admin_client, make_row):
    row = make_row()

    page = admin_client.get(change_url(row)).content.decode()

    version = Notification.objects.get(pk=row.pk).updated_at.isoformat()
    assert f'type="hidden" name="version" value="{version}"' in page


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_deadline")
def test_an_edit_saved_after_the_lease_ran_out_is_not_undone_by_the_late_firing(webhook_server, admin_client):
    """A tick stalled past its lease (a paused VM, a stopped process) still holds its claim
    token: the row is no longer in flight, so the edit is taken, and it fences the late
    firing as `replace` does. Without the fence its success deleted the edited row."""
    row = schedule(channels=["webhook"], webhook_url=webhook_server.url("/old"), payload={"order": 7})
    tick = HeldTick(webhook_server, 200)
    lapsed = timezone.now() - timedelta(seconds=1)
    Notification.objects.filter(pk=row.pk).update(claimed_until=lapsed)  # the lease ran out
    loaded = Notification.objects.get(pk=row.pk)

    response = admin_client.post(change_url(row), change_form(loaded, payload='{"order": 8}'))

    assert response.status_code == 302
    tick.finish()
    stored = Notification.objects.get(pk=row.pk)  # the late firing's success wrote nothing back
    assert stored.payload == {"order": 8} and stored.claim_token is None
    assert run_tick().counts()["succeeded"] == 1  # the edited row goes out as edited
    assert [r.path for r in webhook_server.received] == ["/old", "/old"]
    assert b'"order":8' in webhook_server.received[-1].body.replace(b" ", b"")
