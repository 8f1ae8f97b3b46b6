"""Editing a row's rule in the admin starts its schedule again under the new rule.

The admin saves through `services.edit`, which moves `starts_at` (an RRULE's start) with
`next_fire_at`: the change page's preview and every firing after the next follow the new
rule, not the old one's phase. Through the admin's own pages, as a superuser.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail

from notifications.api import run_tick, schedule
from notifications.models import Notification
from tests.support.admin_forms import change_form, change_url

pytestmark = pytest.mark.django_db

CREATED = datetime(2029, 12, 20, 12, tzinfo=UTC)
FIRST_DUE = datetime(2030, 3, 1, 9, tzinfo=UTC)  # a Friday, months ahead: the old rule's start
EDITED = datetime(2030, 1, 1, 12, tzinfo=UTC)  # a Tuesday
DAILY_AT_9 = "FREQ=DAILY;BYHOUR=9;BYMINUTE=0"
MONDAYS = [datetime(2030, 1, 7, 9, tzinfo=UTC) + timedelta(weeks=w) for w in range(6)]


def standup_opened_later(time_machine, admin_client, admin_user, rule: str = DAILY_AT_9) -> Notification:
    """A recurring row scheduled at CREATED, first due FIRST_DUE; then, at EDITED, a superuser opens the admin."""
    time_machine.move_to(CREATED, tick=False)
    row = schedule(
        channels=["email"],
        email_to="ada@example.com",
        subject="Standup",
        body="Hello",
        recurrence_rule=rule,
        timezone="UTC",
        fire_at=FIRST_DUE,
    )
    time_machine.move_to(EDITED, tick=False)
    admin_client.force_login(admin_user)
    return row


def preview_row(moment: datetime) -> str:
    """A UTC row's occurrence: one column (a second, UTC, would say the same)."""
    return f"<tr><td>{moment:%Y-%m-%d %H:%M:%S} UTC</td></tr>"


@pytest.mark.parametrize(
    ("old_rule", "new_rule"),
    [
        (DAILY_AT_9, "FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0"),
        ("0 9 * * *", "0 9 * * 1"),
    ],
    ids=["rrule", "cron"],
)
def test_a_rule_edited_in_the_admin_governs_the_preview_and_the_next_two_firings(
    admin_client, admin_user, time_machine, old_rule, new_rule
):
    row = standup_opened_later(time_machine, admin_client, admin_user, old_rule)
    assert row.starts_at == FIRST_DUE

    response = admin_client.post(change_url(row), change_form(row, recurrence_rule=new_rule))

    assert response.status_code == 302, response.context and response.context["adminform"].form.errors
    row.refresh_from_db()
    # The new rule starts at its first firing (its COUNT would count from there), not at the edit.
    assert (row.recurrence_rule, row.next_fire_at, row.starts_at) == (new_rule, MONDAYS[0], MONDAYS[0])

    html = admin_client.get(change_url(row)).content.decode()
    for monday in MONDAYS[:5]:
        assert preview_row(monday) in html, monday
    assert preview_row(MONDAYS[5]) not in html

    fired = []
    for monday in MONDAYS[:2]:
        time_machine.move_to(monday + timedelta(seconds=30), tick=False)
        report = run_tick(now=monday + timedelta(seconds=30))
        assert report.counts()["succeeded"] == 1, report.summary()
        row.refresh_from_db()
        fired.append((row.last_fired_at, row.next_fire_at))

    assert fired == [
        (MONDAYS[0] + timedelta(seconds=30), MONDAYS[1]),
        (MONDAYS[1] + timedelta(seconds=30), MONDAYS[2]),
    ]
    assert len(mail.outbox) == 2


def test_a_rule_edited_with_a_due_time_set_by_hand_counts_from_that_due_time(admin_client, admin_user, time_machine):
    row = standup_opened_later(time_machine, admin_client, admin_user)
    # Every other week from a Wednesday: the phase comes from the rule's start.
    changes = {"recurrence_rule": "FREQ=WEEKLY;INTERVAL=2;BYHOUR=9;BYMINUTE=0"}
    changes |= {"next_fire_at_0": "2030-01-09", "next_fire_at_1": "09:00:00"}

    response = admin_client.post(change_url(row), change_form(row, **changes))

    assert response.status_code == 302, response.context and response.context["adminform"].form.errors
    row.refresh_from_db()
    wednesday = datetime(2030, 1, 9, 9, tzinfo=UTC)
    assert (row.next_fire_at, row.starts_at) == (wednesday, wednesday)
    html = admin_client.get(change_url(row)).content.decode()
    assert preview_row(wednesday + timedelta(weeks=2)) in html


def test_editing_other_fields_leaves_the_schedule_alone(admin_client, admin_user, time_machine):
    row = standup_opened_later(time_machine, admin_client, admin_user)

    assert admin_client.post(change_url(row), change_form(row, subject="Daily standup")).status_code == 302

    row.refresh_from_db()
    assert (row.subject, row.next_fire_at, row.starts_at) == ("Daily standup", FIRST_DUE, FIRST_DUE)
