"""The write-back's statements (`notifications.store.statements`) on every database.

The delivery log's INSERT stores every value as the write-back was given it: PostgreSQL
takes the records as one array per column, whose text form quotes and escapes each element.
`ids_in` finds the rows `pk__in` finds: PostgreSQL takes the ids as one array."""

from __future__ import annotations

import uuid

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from notifications.models import DeliveryAttempt, Notification
from notifications.store.statements import ids_in, insert_statements, unsaved

pytestmark = pytest.mark.django_db

AWKWARD = ['say "hi"', "it's", "back\\slash", "{a,b}", "NULL", "", " padded ", "line\nbreak", "é 😀", '\\"']


def record(row: Notification, **values) -> DeliveryAttempt:
    fields = {
        "notification_id": row.pk,
        "firing_id": uuid.uuid4(),
        "channel": "webhook",
        "target": "example.com",
        "recipient": "",
        "sent_to": "example.com",
        "summary": "",
        "outcome": "failed",
        "error": "",
        "error_class": "",
        "http_status": None,
        "duration_ms": 0,
        "attempted_at": timezone.now(),
    }
    return unsaved(DeliveryAttempt, {**fields, **values})


def insert(records: list[DeliveryAttempt]) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        for sql, params in insert_statements(DeliveryAttempt, records):
            cursor.execute(sql, params)


def test_every_value_is_stored_as_written():
    row = Notification.objects.create(channels=["webhook"], webhook_url="https://example.com/hook", timezone="UTC")
    records = [record(row, error=text, summary=text[:10], http_status=500 + i) for i, text in enumerate(AWKWARD)]
    records.append(record(row, http_status=None, duration_ms=2**31 - 1))
    insert(records)
    stored = list(
        DeliveryAttempt.objects.order_by("pk").values_list(
            "firing_id", "error", "summary", "http_status", "duration_ms", "attempted_at"
        )
    )
    expected = [(r.firing_id, r.error, r.summary, r.http_status, r.duration_ms, r.attempted_at) for r in records]
    assert stored == expected


@pytest.mark.parametrize("values", [{"channel": "x" * 17}, {"http_status": -1}])
def test_a_value_its_column_refuses_is_refused_not_cut_short(values, vendor):
    if vendor == "sqlite" and "channel" in values:
        pytest.skip("SQLite keeps a string of any length")
    row = Notification.objects.create(channels=["webhook"], webhook_url="https://example.com/hook", timezone="UTC")
    with pytest.raises((DatabaseError, ValueError)):
        insert([record(row), record(row, **values)])
    assert not DeliveryAttempt.objects.exists()


@pytest.mark.parametrize("wanted", [[0, 2], [], [1], ["0", 2]])
def test_ids_in_finds_what_pk_in_finds(wanted):
    rows = Notification.objects.bulk_create(
        Notification(channels=["webhook"], webhook_url="https://example.com/hook", timezone="UTC") for _ in range(3)
    )
    pks = [rows[int(i)].pk if type(i) is int else str(rows[int(i)].pk) for i in wanted]
    found = set(Notification.objects.filter(ids_in(pks)).values_list("pk", flat=True))
    assert found == set(Notification.objects.filter(pk__in=pks).values_list("pk", flat=True))
    assert found == {rows[int(i)].pk for i in wanted}
    assert Notification.objects.filter(ids_in(pks)).update(held_for="x") == len(wanted)
