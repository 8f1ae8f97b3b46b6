"""Erasure finds a person's rows by index (issue 45, finding 10): every path that writes or
changes a row's addresses keeps the index in step, a deleted row takes its entries with it,
the migration indexes the rows it finds, and the lookup is an index lookup (the plan)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.mail import send_mail
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from notifications.api import cancel, erase, run_tick, schedule, schedule_many
from notifications.models import AddressKey, Notification
from notifications.models.address_keys import digest, index_all, key_of, rows_naming, written_in
from notifications.models.addresses import bare, mentions
from notifications.services import erasure, tokens
from tests.support.admin_forms import add_form, change_form, change_url

pytestmark = pytest.mark.django_db(transaction=True)  # real commits: the queued mail's rows, the cascade

LATER = timezone.now() + timedelta(days=1)
MAIL = {"channels": ["email"], "subject": "Hi", "body": "Hello", "fire_at": LATER}
GRACE = "grace@exämple.org"  # her domain as she types it; the erase key is punycode
GRACE_KEY = "grace@xn--exmple-cua.org"


def indexed(row_id, key=GRACE_KEY) -> bool:
    return AddressKey.objects.filter(key=digest(key), notification_id=row_id).exists()


def erased_rows(address=GRACE) -> tuple[int, int]:
    counts = erase(address=address)
    return counts["notifications"], counts["notifications_changed"]


@pytest.mark.parametrize(
    "fields",
    [
        {"email_to": "Grace <GRACE@EXÄMPLE.org>"},
        {"email_to": ["bob@example.com"], "email_cc": [f"Grace <{GRACE_KEY}>"]},
        {"email_to": ["bob@example.com"], "email_bcc": ["Grace@Exämple.org"]},
        {"email_to": ["bob@example.com"], "reply_to": [GRACE]},
        {"email_to": ["bob@example.com"], "from_email": "Grace <grace@EXÄMPLE.org>"},
        {"email_to": ["bob@example.com"], "headers": {"X-On-Behalf-Of": f"sent for {GRACE_KEY.upper()}."}},
        {"email_to": ["bob@example.com"], "recipient": "Grace@Exämple.org"},
    ],
    ids=["to", "cc", "bcc", "reply-to", "from", "header", "recipient"],
)
def test_schedule_indexes_every_column_that_names_her_in_any_spelling(fields):
    row = schedule(**MAIL, **fields)

    assert indexed(row.pk)
    assert sum(erased_rows()) == 1
    assert not Notification.objects.filter(pk=row.pk, email_to__icontains="grace").exists()
    assert not AddressKey.objects.filter(key=digest(GRACE_KEY)).exists()  # nothing names her any more


def test_schedule_many_indexes_each_row_with_it():
    rows = schedule_many(
        [{**MAIL, "email_to": f"reader{n}@example.com"} for n in range(50)] + [{**MAIL, "email_to": GRACE}]
    )

    assert [r.pk for r in rows if indexed(r.pk)] == [rows[-1].pk]
    assert indexed(rows[7].pk, "reader7@example.com")
    assert erased_rows() == (1, 0)
    assert Notification.objects.count() == 50


def test_queued_email_backend_rows_are_indexed():
    with override_settings(EMAIL_BACKEND="notifications.mail.QueuedEmailBackend"):
        send_mail("Hi", "Body", None, ["bob@example.com", "Grace <GRACE@exämple.org>"])

    (row,) = Notification.objects.all()
    assert indexed(row.pk)
    assert erased_rows() == (0, 1)  # Bob still gets it
    row.refresh_from_db()
    assert row.email_to == ["bob@example.com"] and not indexed(row.pk)


def test_the_http_api_indexes_the_rows_it_makes(client):
    token = tokens.create("all", ["schedule"])[1]
    made = client.post(
        "/notifications/api/v1/notifications",
        {"channels": ["email"], "email_to": f"Grace <{GRACE}>", "subject": "Hi", "body": "x"},
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )

    assert made.status_code == 201, made.content
    assert indexed(made.json()["id"])
    assert erased_rows() == (1, 0)


def test_an_admin_edit_moves_the_row_from_one_person_to_another(admin_client):
    row = schedule(**MAIL, email_to=[GRACE, "bob@example.com"])

    response = admin_client.post(change_url(row), change_form(row, email_to="bob@example.com, cy@example.com"))

    assert response.status_code == 302, response.context["adminform"].form.errors
    assert not indexed(row.pk) and indexed(row.pk, "cy@example.com")
    assert erased_rows() == (0, 0)  # she is no longer on it
    assert erased_rows("CY@example.com") == (0, 1)


def test_an_admin_add_is_indexed(admin_client):
    response = admin_client.post(reverse("admin:notifications_notification_add"), add_form(email_to=f"Grace <{GRACE}>"))

    assert response.status_code == 302, response.context["adminform"].form.errors
    assert indexed(Notification.objects.get().pk)
    assert erased_rows() == (1, 0)


def test_a_keyed_replace_and_a_plain_save_rewrite_the_keys():
    row = schedule(**MAIL, key="weekly", email_to=GRACE)
    replaced = schedule(**MAIL, key="weekly", email_to="bob@example.com", on_conflict="replace")
    assert replaced.pk == row.pk and not indexed(row.pk) and indexed(row.pk, "bob@example.com")

    replaced.email_cc = [f"G <{GRACE}>"]
    replaced.save()

    assert indexed(row.pk) and indexed(row.pk, "bob@example.com")
    assert erased_rows() == (0, 1)


@override_settings(EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend")
def test_a_deleted_row_takes_its_entries_with_it():
    delivered = schedule(**{**MAIL, "fire_at": timezone.now()}, email_to=GRACE)
    cancelled = schedule(**MAIL, email_to=GRACE, key="c")
    raw = schedule(**MAIL, email_to=GRACE)
    kept = schedule(**MAIL, email_to="bob@example.com")

    assert run_tick().counts()["succeeded"] == 1  # a delivered one-shot row is deleted by the write-back
    cancel("c")
    with connection.cursor() as cursor:  # and by the host's own SQL
        cursor.execute(f"DELETE FROM {Notification._meta.db_table} WHERE id = %s", [raw.pk])

    assert not Notification.objects.filter(pk__in=[delivered.pk, cancelled.pk, raw.pk]).exists()
    assert list(AddressKey.objects.values_list("notification_id", flat=True)) == [kept.pk]


def test_index_all_indexes_rows_written_around_the_app():
    Notification.objects.bulk_create([Notification(channels=["email"], email_to=f"Grace <{GRACE}>", timezone="UTC")])
    assert erased_rows() == (0, 0)  # not indexed: not found

    assert index_all() == 1
    assert erased_rows() == (1, 0)


def test_the_migration_indexes_the_rows_it_finds():
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("notifications")
    executor.migrate([("notifications", "0027_escalation")])
    try:
        old = executor.loader.project_state([("notifications", "0027_escalation")]).apps
        Old = old.get_model("notifications", "Notification")
        theirs = Old.objects.create(channels=["email"], email_to=f"Grace <{GRACE}>", timezone="UTC")
        shared = Old.objects.create(
            channels=["email"], email_to=["bob@example.com"], email_cc=["GRACE@xn--exmple-cua.org"], timezone="UTC"
        )
        Old.objects.create(channels=["email"], email_to=["bob@example.com"], timezone="UTC")
    finally:
        MigrationExecutor(connection).migrate(latest)

    assert indexed(theirs.pk) and indexed(shared.pk)
    assert erased_rows() == (1, 1)


def many_rows(n: int) -> None:
    """`n` rows to other people, indexed; the table's statistics read."""
    Notification.objects.bulk_create(
        [Notification(channels=["email"], email_to=f"reader{i}@example.com", timezone="UTC") for i in range(n)],
        batch_size=1000,
    )
    index_all()
    schedule(**MAIL, email_to=GRACE)
    with connection.cursor() as cursor:
        for model in (Notification, AddressKey):
            table = connection.ops.quote_name(model._meta.db_table)
            cursor.execute(f"ANALYZE {table}" if connection.vendor != "mysql" else f"ANALYZE TABLE {table}")
            if connection.vendor == "mysql":
                cursor.fetchall()


def plan_of_lookup() -> str:
    sql, params = rows_naming(erasure.person(address=GRACE).keys).query.sql_with_params()
    prefix = {"sqlite": "EXPLAIN QUERY PLAN ", "postgresql": "EXPLAIN ", "mysql": "EXPLAIN "}[connection.vendor]
    with connection.cursor() as cursor:
        cursor.execute(prefix + sql, params)
        return "\n".join(" ".join(str(c) for c in row) for row in cursor.fetchall())


def test_the_lookup_reads_the_index_not_the_table():
    many_rows(5000)

    plan = plan_of_lookup()

    assert "notification_address_key_idx" in plan, plan
    if connection.vendor == "postgresql":
        assert "Seq Scan" not in plan, plan
    if connection.vendor == "sqlite":
        assert "SCAN notifications_addresskey" not in plan, plan
    assert erased_rows() == (1, 0)


SPELLINGS = [
    "Reader 1 <reader1@example.com>",
    "Ada Lovelace <ADA@EXÄMPLE.com>",
    "  Ada <Ada@Exämple.com> ",
    "O'Brien <o.b+x@example.org>",
    "J. Doe <J@X.com>",
    '"Doe, John" <j@x.com>',
    "Ada (work) <a@b.c>",
    "Ada<a@b.c>",
    "<a@b.c.>",
    "Jörg-Ümlaut <J@X.de>",
    "Ada <a@[127.0.0.1]>",
    "x <a@b@c>",
    "ada@example.com",
]


@pytest.mark.django_db(transaction=False)
@pytest.mark.parametrize("address", SPELLINGS)
def test_a_listed_address_is_keyed_as_erasure_compares_it(address):
    assert key_of(address) == bare(address)


@pytest.mark.django_db(transaction=False)
@pytest.mark.parametrize(
    "text",
    [
        "550 5.1.1 <GRACE@Exämple.org>: user unknown",
        f"forwarded for x={GRACE_KEY}.",
        "Grace <grace@exämple.org>, bob@example.com",
        f"'{GRACE}'",
    ],
)
def test_free_text_is_keyed_wherever_erasure_would_find_her(text):
    assert mentions(text, GRACE_KEY)
    assert GRACE_KEY in written_in(text)
