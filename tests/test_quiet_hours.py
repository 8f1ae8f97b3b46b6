"""Quiet hours: nothing is sent inside a row's window, read on the row's own wall clock.

A firing or retry that comes due inside the window (which holds its start, not its end)
is not sent: its `next_fire_at` becomes the window's end, when the row is saved and when
a tick finds it due; no retry is spent, no attempt is logged, and the tick counts it as
`deferred=N`. Windows may wrap midnight; the DST days of Europe/Berlin are walked through
as a table (the pure rule, `notifications.rules.quiet`) and end to end.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.test import override_settings

from notifications import services
from notifications.api import run_tick, schedule
from notifications.models import DeliveryAttempt, Notification, TickRun
from notifications.rules import quiet
from tests.support.admin_forms import change_form, change_url
from tests.support.servers import Reply

pytestmark = pytest.mark.django_db

BERLIN = "Europe/Berlin"
# Europe/Berlin in 2025: clocks spring forward at 01:00 UTC on 30 March (02:00 CET becomes
# 03:00 CEST) and fall back at 01:00 UTC on 26 October (03:00 CEST becomes 02:00 CET).
SPRING = datetime(2025, 3, 30, tzinfo=UTC)
FALL = datetime(2025, 10, 26, tzinfo=UTC)
WINTER_EVENING = datetime(2025, 1, 15, 20, 0, tzinfo=UTC)  # 20:00 UTC, 21:00 in Berlin


@pytest.fixture(autouse=True)
def clock(time_machine):
    """Rows are saved before the instants the tests tick at: a row saved due in the past
    is sent now, so saving would read quiet hours at the wall clock's now instead."""
    time_machine.move_to(datetime(2025, 1, 15, 12, 0, tzinfo=UTC), tick=False)
    return time_machine


def utc(day: datetime, hours: float) -> datetime:
    """`hours` after midnight UTC of `day` (negative: the evening before)."""
    return day + timedelta(hours=hours)


def reload(row: Notification) -> Notification:
    return Notification.objects.get(pk=row.pk)


def attempts(row: Notification) -> int:
    return DeliveryAttempt.objects.filter(notification_id=row.pk).count()


def webhook_row(server, **fields) -> Notification:
    """A row saved without quiet hours (so saving moves nothing), given its window afterwards."""
    window = fields.pop("quiet_hours", "")
    row = schedule(channels=["webhook"], webhook_url=server.url(), **fields)
    Notification.objects.filter(pk=row.pk).update(quiet_hours=window)
    return reload(row)


# --- the rule, as a table ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "zone", "at", "end"),
    [
        # A window inside one day, and one wrapping midnight: the start is quiet, the end is not.
        ("09:00-17:00", "UTC", datetime(2025, 1, 15, 9, 0, tzinfo=UTC), datetime(2025, 1, 15, 17, 0, tzinfo=UTC)),
        ("09:00-17:00", "UTC", datetime(2025, 1, 15, 8, 59, 59, tzinfo=UTC), None),
        ("09:00-17:00", "UTC", datetime(2025, 1, 15, 17, 0, tzinfo=UTC), None),
        ("21:00-08:00", "UTC", datetime(2025, 1, 15, 21, 0, tzinfo=UTC), datetime(2025, 1, 16, 8, 0, tzinfo=UTC)),
        ("21:00-08:00", "UTC", datetime(2025, 1, 16, 0, 0, tzinfo=UTC), datetime(2025, 1, 16, 8, 0, tzinfo=UTC)),
        ("21:00-08:00", "UTC", datetime(2025, 1, 16, 7, 59, 59, tzinfo=UTC), datetime(2025, 1, 16, 8, 0, tzinfo=UTC)),
        ("21:00-08:00", "UTC", datetime(2025, 1, 16, 8, 0, tzinfo=UTC), None),
        ("21:00-08:00", "UTC", datetime(2025, 1, 15, 20, 59, 59, tzinfo=UTC), None),
        # Read in the row's zone: 20:00 UTC is 21:00 in Berlin in winter.
        ("21:00-08:00", BERLIN, WINTER_EVENING, datetime(2025, 1, 16, 7, 0, tzinfo=UTC)),
        ("21:00-08:00", BERLIN, WINTER_EVENING - timedelta(seconds=1), None),
        # Spring forward, "01:00-03:00": 01:00 CET to 03:00 CEST, one real hour.
        ("01:00-03:00", BERLIN, utc(SPRING, 0), utc(SPRING, 1)),
        ("01:00-03:00", BERLIN, utc(SPRING, 0.99), utc(SPRING, 1)),
        ("01:00-03:00", BERLIN, utc(SPRING, 1), None),
        # Spring forward, "21:00-02:30": the end falls in the gap, so it is the first
        # instant after it (03:00 CEST, 01:00 UTC).
        ("21:00-02:30", BERLIN, utc(SPRING, -4), utc(SPRING, 1)),
        ("21:00-02:30", BERLIN, utc(SPRING, 0.75), utc(SPRING, 1)),
        ("21:00-02:30", BERLIN, utc(SPRING, 1), None),
        # Fall back, "01:00-03:00": from 01:00 CEST through both 02:00 hours to 03:00 CET,
        # three real hours.
        ("01:00-03:00", BERLIN, utc(FALL, -1), utc(FALL, 2)),
        ("01:00-03:00", BERLIN, utc(FALL, 0.5), utc(FALL, 2)),  # 02:30 CEST
        ("01:00-03:00", BERLIN, utc(FALL, 1.5), utc(FALL, 2)),  # 02:30 CET, the repeated hour
        ("01:00-03:00", BERLIN, utc(FALL, 2), None),
        # Fall back, "21:00-02:30": 02:30 comes twice. The window ends at the first; on the
        # wall clock the repeated 02:00-02:30 is inside again and ends at the second.
        ("21:00-02:30", BERLIN, utc(FALL, -5), utc(FALL, 0.5)),
        ("21:00-02:30", BERLIN, utc(FALL, 0.5), None),  # 02:30 CEST
        ("21:00-02:30", BERLIN, utc(FALL, 1 + 1 / 6), utc(FALL, 1.5)),  # 02:10 CET
        ("21:00-02:30", BERLIN, utc(FALL, 1.5), None),
        ("21:00-02:30", BERLIN, utc(FALL, 20), utc(FALL, 24 + 1.5)),  # the next evening: CET all night
    ],
)
def test_the_end_of_the_window_an_instant_falls_in(window, zone, at, end):
    assert quiet.end_of_window(window, zone, at) == end


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("9:00-17:00", 'Give quiet hours as "HH:MM-HH:MM" on a 24-hour clock (e.g. "21:00-08:00"), or "off", not '),
        ("21:00~08:00", 'Give quiet hours as "HH:MM-HH:MM"'),
        ("night", 'Give quiet hours as "HH:MM-HH:MM"'),
        ("24:00-08:00", "24:00 is not a time of day (00:00 to 23:59)."),
        ("21:00-08:60", "08:60 is not a time of day (00:00 to 23:59)."),
        ("08:00-08:00", "The window starts and ends at 08:00: give two different times."),
    ],
)
def test_a_malformed_window_is_a_validation_error_on_quiet_hours(value, message):
    with pytest.raises(ValidationError) as caught:
        schedule(channels=["email"], email_to="ada@example.com", subject="s", body="b", quiet_hours=value)

    assert list(caught.value.message_dict) == ["quiet_hours"]
    assert caught.value.message_dict["quiet_hours"][0].startswith(message)


@pytest.mark.parametrize("value", ["", "off", "21:00-08:00", "00:00-23:59", "23:59-00:00"])
def test_blank_off_and_windows_are_valid(value):
    assert quiet.errors(value) == []


# --- when it is saved ------------------------------------------------------------------------


def test_a_row_saved_due_inside_its_window_is_due_at_the_window_end(make_row):
    row = make_row(fire_at=datetime(2025, 1, 15, 23, 0, tzinfo=UTC), quiet_hours="21:00-08:00", timezone="UTC")

    assert row.next_fire_at == datetime(2025, 1, 16, 8, 0, tzinfo=UTC)
    assert reload(row).next_fire_at == row.next_fire_at


@pytest.mark.parametrize(
    ("fire_at", "due"),
    [
        (datetime(2025, 1, 15, 21, 0, tzinfo=UTC), datetime(2025, 1, 16, 8, 0, tzinfo=UTC)),  # the start is quiet
        (datetime(2025, 1, 16, 8, 0, tzinfo=UTC), datetime(2025, 1, 16, 8, 0, tzinfo=UTC)),  # the end is not
        (datetime(2025, 1, 15, 20, 59, tzinfo=UTC), datetime(2025, 1, 15, 20, 59, tzinfo=UTC)),
    ],
)
def test_the_window_holds_its_start_not_its_end(make_row, fire_at, due):
    assert make_row(fire_at=fire_at, quiet_hours="21:00-08:00", timezone="UTC").next_fire_at == due


def test_a_row_due_now_inside_its_window_waits_for_the_end(make_row, clock):
    clock.move_to(WINTER_EVENING + timedelta(hours=2), tick=False)  # 23:00 in Berlin

    row = schedule(
        channels=["email"],
        email_to="ada@example.com",
        subject="s",
        body="b",
        quiet_hours="21:00-08:00",
        timezone=BERLIN,
    )

    assert row.next_fire_at == datetime(2025, 1, 16, 7, 0, tzinfo=UTC)  # 08:00 in Berlin


def test_a_recurring_rows_first_occurrence_inside_the_window_moves_to_its_end():
    row = schedule(
        channels=["email"],
        email_to="ada@example.com",
        subject="s",
        body="b",
        recurrence_rule="0 22 * * *",
        timezone=BERLIN,
        quiet_hours="21:00-08:00",
    )

    assert row.next_fire_at == datetime(2025, 1, 16, 7, 0, tzinfo=UTC)


def test_saving_on_the_spring_forward_night_moves_the_due_time_past_the_gap(make_row):
    row = make_row(fire_at=utc(SPRING, 0.5), quiet_hours="01:00-03:00", timezone=BERLIN)  # 01:30 CET

    assert row.next_fire_at == utc(SPRING, 1)  # 03:00 CEST


@override_settings(NOTIFICATIONS_QUIET_HOURS="21:00-08:00")
def test_the_site_default_applies_to_rows_without_a_window_and_off_opts_out(make_row):
    night = datetime(2025, 1, 15, 23, 0, tzinfo=UTC)

    default = make_row(fire_at=night, timezone="UTC")
    own = make_row(fire_at=night, timezone="UTC", quiet_hours="22:00-23:30")
    off = make_row(fire_at=night, timezone="UTC", quiet_hours="off")

    assert default.next_fire_at == datetime(2025, 1, 16, 8, 0, tzinfo=UTC)
    assert own.next_fire_at == datetime(2025, 1, 15, 23, 30, tzinfo=UTC)  # the row's own wins
    assert off.next_fire_at == night


def test_an_admin_edit_into_the_window_moves_the_due_time(admin_client, make_row):
    row = make_row(fire_at=datetime(2025, 1, 15, 23, 0, tzinfo=UTC), timezone="UTC")
    page = admin_client.get(change_url(row)).content.decode()
    assert 'name="quiet_hours"' in page  # the Limits fieldset

    response = admin_client.post(change_url(row), change_form(row, quiet_hours="21:00-08:00"))

    assert response.status_code == 302
    row = reload(row)
    assert (row.quiet_hours, row.next_fire_at) == ("21:00-08:00", datetime(2025, 1, 16, 8, 0, tzinfo=UTC))


def test_an_admin_edit_with_a_bad_window_is_a_form_error(admin_client, make_row):
    row = make_row(fire_at=datetime(2025, 1, 15, 23, 0, tzinfo=UTC), timezone="UTC")

    response = admin_client.post(change_url(row), change_form(row, quiet_hours="25:00-08:00"))

    assert response.status_code == 200
    assert "25:00 is not a time of day (00:00 to 23:59)." in response.content.decode()
    assert reload(row).quiet_hours == ""


def test_services_edit_of_the_due_time_into_the_window_moves_it(make_row):
    row = make_row(fire_at=datetime(2025, 1, 15, 12, 0, tzinfo=UTC), timezone="UTC", quiet_hours="21:00-08:00")
    row.next_fire_at = datetime(2025, 1, 15, 22, 0, tzinfo=UTC)

    written = services.edit(row, ["next_fire_at"], now=datetime(2025, 1, 15, 11, 0, tzinfo=UTC))

    assert "next_fire_at" in written
    assert reload(row).next_fire_at == datetime(2025, 1, 16, 8, 0, tzinfo=UTC)


def test_a_plain_model_save_or_create_moves_the_due_time_too(make_row):
    inside = datetime(2025, 1, 15, 22, 0, tzinfo=UTC)
    fields = {"channels": ["email"], "email_to": "ada@example.com", "subject": "s", "body": "b", "timezone": "UTC"}

    created = Notification.objects.create(**fields, next_fire_at=inside, quiet_hours="21:00-08:00")
    row = make_row(fire_at=datetime(2025, 1, 15, 12, 30, tzinfo=UTC), timezone="UTC")
    row.quiet_hours = "12:00-13:00"
    row.save()

    assert reload(created).next_fire_at == datetime(2025, 1, 16, 8, 0, tzinfo=UTC)
    assert reload(row).next_fire_at == datetime(2025, 1, 15, 13, 0, tzinfo=UTC)


# --- when a tick finds it due ---------------------------------------------------------------


def test_a_tick_inside_the_window_defers_the_row_to_its_end_sending_nothing(webhook_server):
    due = datetime(2025, 1, 15, 20, 55, tzinfo=UTC)  # before the window: saving moves nothing
    row = webhook_row(webhook_server, fire_at=due, quiet_hours="21:00-08:00", timezone="UTC")
    firing = row.firing_id

    report = run_tick(now=datetime(2025, 1, 15, 21, 10, tzinfo=UTC))  # a late tick, inside the window

    assert report.counts()["deferred"] == 1
    assert report.counts()["succeeded"] == report.counts()["retried"] == 0
    assert webhook_server.received == []
    assert attempts(row) == 0
    row = reload(row)
    assert row.next_fire_at == datetime(2025, 1, 16, 8, 0, tzinfo=UTC)
    assert (row.error_count, row.last_error, row.claim_token, row.firing_id) == (0, None, None, firing)
    assert row.state(datetime(2025, 1, 15, 21, 10, tzinfo=UTC)) == "scheduled"

    assert run_tick(now=datetime(2025, 1, 16, 7, 59, tzinfo=UTC)).claimed == 0
    sent = run_tick(now=datetime(2025, 1, 16, 8, 0, tzinfo=UTC))

    assert sent.counts()["succeeded"] == 1
    assert [r.headers["webhook-id"] for r in webhook_server.received] == [f"msg_{firing}"]  # the same firing


def test_a_row_due_before_the_window_and_found_after_it_is_sent(webhook_server):
    row = webhook_row(webhook_server, fire_at=datetime(2025, 1, 15, 20, 0, tzinfo=UTC), quiet_hours="21:00-08:00")

    report = run_tick(now=datetime(2025, 1, 16, 8, 0, tzinfo=UTC))

    assert (report.counts()["succeeded"], report.counts()["deferred"]) == (1, 0)
    assert not Notification.objects.filter(pk=row.pk).exists()


def test_a_retry_coming_due_inside_the_window_is_deferred_without_spending_a_retry(webhook_server):
    webhook_server.reply = Reply(status=503)
    row = webhook_row(webhook_server, fire_at=datetime(2025, 1, 15, 20, 59, 30, tzinfo=UTC), quiet_hours="21:00-08:00")

    first = run_tick(now=datetime(2025, 1, 15, 20, 59, 30, tzinfo=UTC))
    assert first.counts()["retried"] == 1
    assert reload(row).next_fire_at == datetime(2025, 1, 15, 21, 0, 30, tzinfo=UTC)  # BACKOFF[0], in the window

    deferred = run_tick(now=datetime(2025, 1, 15, 21, 0, 30, tzinfo=UTC))

    assert deferred.counts()["deferred"] == 1
    row = reload(row)
    assert (row.error_count, row.next_fire_at) == (1, datetime(2025, 1, 16, 8, 0, tzinfo=UTC))
    assert row.last_error == "webhook: HTTP 503"  # the write-back moved only the due time
    assert (attempts(row), len(webhook_server.received)) == (1, 1)

    retried = run_tick(now=datetime(2025, 1, 16, 8, 0, tzinfo=UTC))

    assert retried.counts()["retried"] == 1
    row = reload(row)
    assert (row.error_count, row.next_fire_at) == (2, datetime(2025, 1, 16, 8, 5, tzinfo=UTC))  # BACKOFF[1]
    assert len(webhook_server.received) == 2


def test_a_deferred_recurring_row_fires_once_at_the_end_then_keeps_its_schedule(webhook_server):
    row = webhook_row(
        webhook_server,
        recurrence_rule="0 * * * *",
        fire_at=datetime(2025, 1, 15, 21, 0, tzinfo=UTC),
        timezone="UTC",
        quiet_hours="21:00-08:00",
    )

    assert run_tick(now=datetime(2025, 1, 15, 21, 0, tzinfo=UTC)).counts()["deferred"] == 1
    assert reload(row).next_fire_at == datetime(2025, 1, 16, 8, 0, tzinfo=UTC)
    sent = run_tick(now=datetime(2025, 1, 16, 8, 0, tzinfo=UTC))

    assert sent.counts()["succeeded"] == 1
    assert len(webhook_server.received) == 1  # the night's hourly occurrences are not sent
    assert reload(row).next_fire_at == datetime(2025, 1, 16, 9, 0, tzinfo=UTC)


@override_settings(NOTIFICATIONS_QUIET_HOURS="21:00-08:00")
def test_the_tick_applies_the_site_default_and_a_rows_off(webhook_server):
    evening = datetime(2025, 1, 15, 20, 30, tzinfo=UTC)
    quiet_row = webhook_row(webhook_server, fire_at=evening, timezone="UTC")
    loud_row = webhook_row(webhook_server, fire_at=evening, timezone="UTC", quiet_hours="off")

    report = run_tick(now=datetime(2025, 1, 15, 22, 0, tzinfo=UTC))

    assert (report.counts()["deferred"], report.counts()["succeeded"]) == (1, 1)
    assert reload(quiet_row).next_fire_at == datetime(2025, 1, 16, 8, 0, tzinfo=UTC)
    assert not Notification.objects.filter(pk=loud_row.pk).exists()


@pytest.mark.parametrize(
    ("window", "due", "tick", "end"),
    [
        ("21:00-02:30", utc(SPRING, -3.5), utc(SPRING, -3), utc(SPRING, 1)),  # 22:00 CET -> 03:00 CEST
        ("01:00-03:00", utc(SPRING, -0.5), utc(SPRING, 0.5), utc(SPRING, 1)),  # 01:30 CET -> 03:00 CEST
        ("01:00-03:00", utc(FALL, -1.5), utc(FALL, 1.5), utc(FALL, 2)),  # 02:30 CET -> 03:00 CET
        ("21:00-02:30", utc(FALL, -5.5), utc(FALL, -5), utc(FALL, 0.5)),  # 22:00 CEST -> 02:30 CEST
        ("21:00-02:30", utc(FALL, 0.75), utc(FALL, 1 + 1 / 6), utc(FALL, 1.5)),  # the repeated 02:10
    ],
    ids=["spring-wrapping", "spring-night", "fall-night", "fall-wrapping", "fall-repeated-hour"],
)
def test_on_the_dst_nights_a_tick_defers_to_the_window_end_and_sends_then(webhook_server, window, due, tick, end):
    row = webhook_row(webhook_server, fire_at=due, timezone=BERLIN, quiet_hours=window)

    assert run_tick(now=tick).counts()["deferred"] == 1
    assert reload(row).next_fire_at == end
    assert run_tick(now=end - timedelta(seconds=1)).claimed == 0
    assert run_tick(now=end).counts()["succeeded"] == 1
    assert len(webhook_server.received) == 1


# --- counted, with the settings checked --------------------------------------------------------


def test_the_summary_line_and_the_tick_record_count_deferred_rows(webhook_server, clock):
    clock.move_to(datetime(2025, 1, 15, 22, 0, tzinfo=UTC), tick=False)
    webhook_row(webhook_server, fire_at=datetime(2025, 1, 15, 20, 0, tzinfo=UTC), quiet_hours="21:00-08:00")
    out = StringIO()

    call_command("runtick", stdout=out)

    assert "claimed=1 succeeded=0 partial=0 retried=0 dead_lettered=0 expired=0 deferred=1" in out.getvalue()
    assert TickRun.objects.latest().deferred == 1


def test_a_window_written_around_validation_dead_letters_the_row(webhook_server):
    (row,) = Notification.objects.bulk_create(
        [
            Notification(
                channels=["webhook"],
                webhook_url=webhook_server.url(),
                quiet_hours="25:00-08:00",
                timezone="UTC",
                next_fire_at=datetime(2025, 1, 15, 12, tzinfo=UTC),
            )
        ]
    )
    row = row if row.pk else Notification.objects.get()

    run_tick(now=datetime(2025, 1, 15, 12, tzinfo=UTC))

    row = reload(row)
    assert row.last_error == "invalid: quiet_hours: 25:00 is not a time of day (00:00 to 23:59)."
    assert (row.next_fire_at, row.dead_lettered_at) == (None, datetime(2025, 1, 15, 12, tzinfo=UTC))
    assert webhook_server.received == []


def quiet_check_messages() -> list[tuple[str, str, str | None]]:
    from notifications.checks.numbers import check_settings

    return [(m.id, m.msg, m.hint) for m in check_settings() if m.id == "notifications.E017"]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("21-8", 'Give quiet hours as "HH:MM-HH:MM" on a 24-hour clock (e.g. "21:00-08:00"), or "off", not \'21-8\'.'),
        ("08:00-08:00", "The window starts and ends at 08:00: give two different times."),
        (None, 'Give quiet hours as "HH:MM-HH:MM" on a 24-hour clock (e.g. "21:00-08:00"), or "off", not None.'),
    ],
)
def test_a_bad_site_default_is_check_e017_and_ticks_run_without_one(value, problem, webhook_server):
    with override_settings(NOTIFICATIONS_QUIET_HOURS=value):
        assert quiet_check_messages() == [
            (
                "notifications.E017",
                f"NOTIFICATIONS_QUIET_HOURS is not a quiet window: {problem}",
                'For example "21:00-08:00" (read in each row\'s time zone; it may wrap midnight), or blank for '
                "none. Until it is fixed, rows without quiet hours of their own have none.",
            )
        ]
        webhook_row(webhook_server, fire_at=datetime(2025, 1, 15, 8, 0, tzinfo=UTC))
        assert run_tick(now=datetime(2025, 1, 15, 8, 0, tzinfo=UTC)).counts()["succeeded"] == 1


@pytest.mark.parametrize("value", ["", "off", "22:30-07:00"])
def test_a_good_site_default_passes_the_checks(value):
    with override_settings(NOTIFICATIONS_QUIET_HOURS=value):
        assert quiet_check_messages() == []


def test_email_rows_are_deferred_alike(make_row):
    row = make_row(fire_at=datetime(2025, 1, 15, 20, 0, tzinfo=UTC), timezone="UTC")
    Notification.objects.filter(pk=row.pk).update(quiet_hours="21:00-08:00")

    report = run_tick(now=datetime(2025, 1, 15, 21, 30, tzinfo=UTC))

    assert report.counts()["deferred"] == 1
    assert mail.outbox == []
