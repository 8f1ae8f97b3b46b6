"""`manage.py purgenotifications --dead --older-than AGE [--dry-run]`."""

from __future__ import annotations

import argparse
import re
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from notifications.management.arguments import age, age_or_zero
from notifications.models import DeliveryAttempt, Notification
from tests.support.queue_states import make

pytestmark = pytest.mark.django_db
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"


def dead_since(days: float, **fields) -> Notification:
    row = make("dead", **fields)
    Notification.objects.filter(pk=row.pk).update(dead_lettered_at=timezone.now() - timedelta(days=days))
    return row


@pytest.fixture
def queue():
    return {
        "old": dead_since(45),
        "older": dead_since(400),
        "recent": dead_since(3),
        "partial": make("partial"),
        "scheduled": make("scheduled"),
        # A recurring row whose failed firing was dead-lettered long ago but whose schedule runs on.
        "recurring_alive": dead_since(60, recurrence_rule="0 9 * * *"),
    }


def test_purges_only_dead_letters_older_than_the_age(queue, capsys):
    Notification.objects.filter(pk=queue["recurring_alive"].pk).update(next_fire_at=timezone.now() + timedelta(hours=3))

    call_command("purgenotifications", "--dead", "--older-than", "30d")

    left = set(Notification.objects.values_list("pk", flat=True))
    assert left == {queue[k].pk for k in ("recent", "partial", "scheduled", "recurring_alive")}
    out = capsys.readouterr().out
    assert re.match(rf"{STAMP} purged 2 dead letters older than 30d \(dead-lettered before ", out)
    assert out.rstrip().endswith("kept 1 recurring row still scheduled")


def test_a_recurring_dead_letter_with_no_schedule_left_is_purged(queue):
    Notification.objects.filter(pk=queue["recurring_alive"].pk).update(next_fire_at=None)
    call_command("purgenotifications", "--dead", "--older-than", "30d")
    assert not Notification.objects.filter(pk=queue["recurring_alive"].pk).exists()


def test_dry_run_lists_what_it_would_purge_and_changes_nothing(queue, capsys):
    Notification.objects.filter(pk=queue["recurring_alive"].pk).update(next_fire_at=timezone.now() + timedelta(hours=3))
    before = Notification.objects.count()

    call_command("purgenotifications", "--dead", "--older-than", "30d", "--dry-run")  # no -v 2 needed

    assert Notification.objects.count() == before
    lines = capsys.readouterr().out.splitlines()
    older, old = (Notification.objects.get(pk=queue[k].pk) for k in ("older", "old"))
    assert lines[:2] == [
        f"would purge #{older.pk}: dead-lettered {older.dead_lettered_at:%Y-%m-%d %H:%M:%S%z}: webhook: HTTP 410",
        f"would purge #{old.pk}: dead-lettered {old.dead_lettered_at:%Y-%m-%d %H:%M:%S%z}: webhook: HTTP 410",
    ]
    assert lines[2].startswith("dry run: would purge 2 dead letters older than 30d")
    assert lines[2].endswith("kept 1 recurring row still scheduled")
    assert len(lines) == 3


@pytest.mark.parametrize("zero", ["0", "0d", "0s", "0.0h"])
def test_older_than_zero_means_every_dead_letter(queue, capsys, zero):
    call_command("purgenotifications", "--dead", "--older-than", zero, "--dry-run")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5  # old, older, recent, the recurring one whose schedule has nothing left; the total
    assert lines[-1] == "dry run: would purge 4 dead letters of any age; kept 0 recurring rows still scheduled"

    call_command("purgenotifications", "--dead", "--older-than", zero)

    out = capsys.readouterr().out
    assert re.fullmatch(rf"{STAMP} purged 4 dead letters of any age; kept 0 recurring rows still scheduled\n", out)
    assert set(Notification.objects.values_list("pk", flat=True)) == {queue["partial"].pk, queue["scheduled"].pk}


def test_one_dead_letter_is_said_in_the_singular(capsys):
    dead_since(2)
    call_command("purgenotifications", "--dead", "--older-than", "1d")
    assert re.match(rf"{STAMP} purged 1 dead letter older than 1d ", capsys.readouterr().out)


def test_a_big_purge_reports_its_progress(monkeypatch, capsys):
    from notifications.management.commands import purgenotifications
    from notifications.services import actions

    for _ in range(7):
        dead_since(40)
    monkeypatch.setattr(actions, "PURGE_BATCH", 2)  # read where purge() lives
    monkeypatch.setattr(purgenotifications, "PROGRESS_INTERVAL", 0)  # a line per batch

    call_command("purgenotifications", "--dead", "--older-than", "30d")

    lines = [re.sub(STAMP, "T", line) for line in capsys.readouterr().out.splitlines()]
    assert lines[:3] == [f"T purging: {n} of 7 dead letters deleted" for n in (2, 4, 6)]
    assert lines[3].startswith("T purged 7 dead letters older than 30d") and len(lines) == 4
    assert not Notification.objects.exists()


def test_history_of_purged_rows_stays(queue):
    DeliveryAttempt.objects.create(
        notification_id=queue["old"].pk,
        firing_id=queue["old"].firing_id,
        channel="webhook",
        outcome="failed",
        error="webhook: HTTP 410",
        attempted_at=timezone.now() - timedelta(days=2),
    )
    call_command("purgenotifications", "--dead", "--older-than", "30d")
    assert not Notification.objects.filter(pk=queue["old"].pk).exists()
    assert DeliveryAttempt.objects.filter(notification_id=queue["old"].pk).count() == 1


def test_hours_and_other_units(queue):
    call_command("purgenotifications", "--dead", "--older-than", "48h")
    assert not Notification.objects.filter(pk=queue["recent"].pk).exists()


def test_needs_a_kind_and_an_age():
    with pytest.raises(CommandError, match="--dead"):
        call_command("purgenotifications", "--older-than", "30d")
    with pytest.raises(CommandError, match="--older-than"):
        call_command("purgenotifications", "--dead")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30d", timedelta(days=30)),
        ("12h", timedelta(hours=12)),
        ("90m", timedelta(minutes=90)),
        ("45s", timedelta(seconds=45)),
        ("2w", timedelta(weeks=2)),
        ("1.5d", timedelta(hours=36)),
    ],
)
def test_age_argument(text, expected):
    assert age(text) == expected


@pytest.mark.parametrize(
    "text", ["30", "d", "30 days", "-3d", "0d", "thirty", "99999999999d", "100000000w", "9" * 400 + "d", "366000d"]
)
def test_bad_ages_are_refused_clearly(text):
    with pytest.raises(argparse.ArgumentTypeError):
        age(text)


@pytest.mark.parametrize(
    ("text", "expected"), [("0", timedelta(0)), ("0d", timedelta(0)), ("12h", timedelta(hours=12))]
)
def test_an_age_or_zero(text, expected):
    assert age_or_zero(text) == expected


@pytest.mark.parametrize("text", ["30", "-0d", "00x", ""])
def test_an_age_or_zero_refuses_the_rest(text):
    with pytest.raises(argparse.ArgumentTypeError):
        age_or_zero(text)


def test_bad_age_on_the_command_line():
    with pytest.raises(CommandError, match="is not an age"):
        call_command("purgenotifications", "--dead", "--older-than", "30 days")


def test_an_age_past_the_calendar_is_refused_on_the_command_line():
    with pytest.raises(CommandError, match="is more than 1000 years"):
        call_command("purgenotifications", "--dead", "--older-than", "99999999999d")
    with pytest.raises(CommandError, match="is more than 1000 years"):
        call_command("notifications_status", "--stale-after", "99999999999d")


def test_an_expired_one_shot_kept_as_a_dead_letter_is_purged_too(queue):
    expired = make("expired")
    assert expired.dead_lettered_at is not None  # a firing too late to send is kept as a dead letter
    paused = dead_since(45)
    Notification.objects.filter(pk=paused.pk).update(paused_at=timezone.now())  # an operator's hold: kept

    call_command("purgenotifications", "--dead", "--older-than", "0")

    assert not Notification.objects.filter(pk=expired.pk).exists()
    assert Notification.objects.filter(pk=paused.pk).exists()
