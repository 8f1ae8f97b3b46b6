"""Rows the ORM cannot even load cost only themselves (issue: one bad row stops the queue).

Raw SQL can store values that Django's converters or the database driver refuse to
turn into Python: a JSON integer of 5,000 digits, JSON nested 5,000 deep, `-infinity`
on PostgreSQL, a malformed UUID or an impossible date on SQLite, JSON text Python
refuses on MariaDB/MySQL. Such rows are claimed
with healthy ones; the tick dead-letters them by id with the conversion error and
delivers every healthy row behind them in the same tick.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from notifications.api import run_tick
from notifications.models import Notification

HEALTHY = 250
EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Hi", "body": "Hello", "timezone": "UTC"}
TABLE = Notification._meta.db_table


def huge_integer() -> str:
    return '{"n": ' + "7" * 5000 + "}"


def deep_nesting() -> str:
    return '{"n": ' + "[" * 5000 + "]" * 5000 + "}"


def poison_values(vendor: str) -> dict[str, tuple[str, str]]:
    """name -> (SET clause, parameter) that leaves a row the ORM cannot load."""
    json_cast = "::jsonb" if vendor == "postgresql" else ""
    values = {"huge JSON integer": (f"payload = %s{json_cast}", huge_integer())}
    if vendor == "postgresql":
        values["JSON nested 5,000 deep"] = (f"payload = %s{json_cast}", deep_nesting())
        values["-infinity due time"] = ("next_fire_at = %s::timestamptz", "-infinity")
        values["infinity creation time"] = ("created_at = %s::timestamptz", "infinity")
    elif vendor == "mysql":  # typed columns (UUID, DATETIME) and JSON checked for depth: JSON text it is
        values["huge JSON integer in a list"] = ("channels = %s", "[" + "7" * 5000 + "]")
        values["huge JSON integer in the backoff"] = ("backoff = %s", "[" + "9" * 5000 + "]")
    else:  # SQLite keeps whatever text it is given
        values["malformed UUID"] = ("firing_id = %s", "not-a-uuid")
        values["impossible due date"] = ("next_fire_at = %s", "2026-02-30 09:00:00")
    return values


def make_poisoned_queue() -> list[int]:
    """The poisoned rows first in line (oldest), then HEALTHY rows due behind them."""
    now = timezone.now()
    poison = Notification.objects.bulk_create(
        Notification(next_fire_at=now - timedelta(hours=1), **EMAIL) for _ in poison_values(connection.vendor)
    )
    Notification.objects.bulk_create(
        Notification(next_fire_at=now - timedelta(minutes=1), payload={"n": i}, **EMAIL) for i in range(HEALTHY)
    )
    with connection.cursor() as cursor:
        for row, (assignment, value) in zip(poison, poison_values(connection.vendor).values(), strict=True):
            cursor.execute(f"UPDATE {TABLE} SET {assignment} WHERE id = %s", [value, row.pk])
    return [row.pk for row in poison]


def assert_dead_lettered(poison: list[int]) -> None:
    rows = Notification.objects.filter(pk__in=poison).values_list(
        "pk", "last_error", "dead_lettered_at", "claim_token", "error_count"
    )
    assert len(rows) == len(poison)
    for pk, last_error, dead_at, claim_token, error_count in rows:
        assert last_error.startswith("invalid: cannot load the row: "), (pk, last_error)
        assert dead_at is not None and claim_token is None and error_count == 3
    # Parked: never claimed again, whatever the bad value was.
    assert not Notification.objects.filter(pk__in=poison, next_fire_at__isnull=False).exists()


@pytest.mark.django_db(transaction=True)  # a real tick runs outside any transaction
def test_rows_the_orm_cannot_load_are_dead_lettered_and_the_rest_delivered_in_one_tick():
    poison = make_poisoned_queue()

    report = run_tick()

    assert report.counts()["succeeded"] == HEALTHY
    assert report.counts()["dead_lettered"] == len(poison)
    assert len(mail.outbox) == HEALTHY
    assert_dead_lettered(poison)
    assert Notification.objects.count() == len(poison)  # only the dead letters are left
    assert run_tick().claimed == 0


@pytest.mark.django_db(transaction=True)
def test_runtick_exits_cleanly_with_poisoned_rows_in_the_queue(capsys):
    poison = make_poisoned_queue()

    call_command("runtick")  # raises (exit status 1) if the tick crashed

    out = capsys.readouterr().out
    assert f"succeeded={HEALTHY}" in out
    assert f"dead_lettered={len(poison)}" in out
    assert_dead_lettered(poison)


@pytest.mark.django_db  # inside the test's transaction: a failed read must not abort it
def test_poisoned_rows_inside_a_transaction_do_not_abort_it():
    poison = make_poisoned_queue()

    report = run_tick(limit=50)

    assert report.counts()["succeeded"] == HEALTHY
    assert_dead_lettered(poison)


@pytest.mark.django_db
def test_dry_run_lists_poisoned_rows_instead_of_crashing(capsys):
    poison = make_poisoned_queue()

    call_command("runtick", "--dry-run", "--limit", "20")

    out = capsys.readouterr().out
    for pk in poison:
        assert f"#{pk} cannot be loaded (" in out
    assert out.count(" due since ") == 20 - len(poison)
    assert Notification.objects.filter(pk__in=poison, claim_token__isnull=False).count() == 0  # changes nothing


@pytest.mark.django_db
def test_requeue_skips_a_row_it_cannot_load_and_says_why():
    from notifications.api import requeue

    poison = make_poisoned_queue()
    run_tick()

    result = requeue(Notification.objects.filter(pk__in=poison))

    unloadable = sum(count for reason, count in result.skipped.items() if reason.startswith("cannot be loaded"))
    assert result.changed + unloadable == len(poison)
    assert unloadable >= 1  # the huge JSON integer cannot be read on either database
