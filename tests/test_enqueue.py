"""Enqueueing at the speed of a broker (issue 35): a schedule() that costs its INSERT,
`schedule_many()` all or none in multi-row INSERTs, and the queued email backend on the
bulk path. Statement counts are pinned here; speed is a benchmark figure
(`bench/run.py --scenario enqueue`), never asserted.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core import mail
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.test.utils import override_settings

from notifications import compat
from notifications.api import Attachment, schedule, schedule_many
from notifications.models import Notification, address_keys
from notifications.models.attachments import storage
from notifications.models.validation import KEY_TAKEN

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # a Monday
HOOK = {"channels": ["webhook"], "webhook_url": "https://hooks.example.com/in"}
EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Hi", "body": "Hello"}
# What a statement is, by its first word; transaction control is not the work.
CONTROL = {"BEGIN", "COMMIT", "SAVEPOINT", "RELEASE", "ROLLBACK"}


class Recorded(list):
    """The SQL of every statement this connection runs inside the block, refused ones too
    (Django's CaptureQueriesContext keeps no text of a refused one on MySQL)."""

    def __call__(self, execute, sql, params, many, context):
        self.append(sql)
        return execute(sql, params, many, context)

    def __enter__(self):
        connection.ensure_connection()  # its opening statements (MySQL's SET ...) are not the work
        self._wrapper = connection.execute_wrapper(self)
        self._wrapper.__enter__()
        return self

    def __exit__(self, *exc):
        return self._wrapper.__exit__(*exc)


def statements(queries: Recorded) -> list[str]:
    """The statements run, each as its verb (the fast lane's `NOTIFY`; transaction control left out)."""
    verbs = ["NOTIFY" if "PG_NOTIFY" in sql.upper() else sql.split()[0].upper() for sql in queries]
    return [verb for verb in verbs if verb not in CONTROL]


def wake_up() -> list[str]:
    """What the fast lane adds after commit: NOTIFY on PostgreSQL, nothing elsewhere."""
    return ["NOTIFY"] if connection.vendor == "postgresql" else []


def inserts(queries: Recorded, table: str = "") -> int:
    """INSERTs run (into `table`'s name, when given)."""
    return sum(1 for s in queries if s.split()[0].upper() == "INSERT" and table in s.split()[2])


# --- schedule(): validated once, then only its INSERT ------------------------------------


@pytest.mark.django_db(transaction=True)
def test_schedule_of_a_plain_row_is_its_insert_and_nothing_else():
    with Recorded() as queries:
        row = schedule(**HOOK, payload={"n": 1})

    assert statements(queries) == ["INSERT", *wake_up()]
    assert Notification.objects.get().pk == row.pk


@pytest.mark.django_db(transaction=True)
def test_a_keyed_schedule_with_error_is_its_insert_and_a_taken_key_is_refused_by_the_database():
    with Recorded() as first:
        schedule(**HOOK, key="invoice-7")
    with Recorded() as second, pytest.raises(ValidationError) as refused:
        schedule(**HOOK, key="invoice-7")

    assert statements(first) == ["INSERT", *wake_up()]
    assert statements(second) == ["INSERT"]  # no look before it, none after: the refusal says it all
    assert refused.value.message_dict == {"key": [KEY_TAKEN]}
    assert Notification.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_row_naming_a_person_is_stored_with_its_keys_in_one_statement_on_postgresql():
    """Elsewhere its INSERT and its keys' INSERT, in one transaction."""
    with Recorded() as queries:
        row = schedule(**EMAIL)

    together = ["WITH"] if connection.vendor == "postgresql" else ["INSERT", "INSERT"]
    assert statements(queries) == [*together, *wake_up()]
    assert list(address_keys.rows_naming(["ada@example.com"]).values_list("notification_id", flat=True)) == [row.pk]


@pytest.mark.django_db(transaction=True)
def test_a_row_the_database_refuses_leaves_no_keys_behind():
    first = schedule(**EMAIL, key="welcome-ada")
    with pytest.raises(ValidationError):
        schedule(**{**EMAIL, "email_to": "grace@example.com"}, key="welcome-ada")

    assert list(address_keys.rows_naming(["ada@example.com"]).values_list("notification_id", flat=True)) == [first.pk]
    assert not address_keys.rows_naming(["grace@example.com"]).exists()


@pytest.mark.django_db
def test_rows_with_and_without_optional_values_are_each_stored_as_given():
    """One row's statement leaves its empty columns out of the parameters: rows that fill
    different ones, one after another, each keep their own."""
    expires = NOW + timedelta(days=1)
    given = [
        {**HOOK, "payload": {"n": 1}, "expires_at": expires, "max_retries": 2},
        {**HOOK, "payload": {"n": 2}},
        {**EMAIL, "max_delay": 60, "recipient": "user-7"},
        {**HOOK, "payload": {"n": 4}, "expires_at": expires, "max_retries": 2},
    ]
    rows = [schedule(**fields) for fields in given]

    stored = {
        pk: rest
        for pk, *rest in Notification.objects.values_list(
            "pk", "payload", "expires_at", "max_retries", "max_delay", "recipient"
        )
    }
    assert [stored[row.pk] for row in rows] == [
        [{"n": 1}, expires, 2, None, ""],
        [{"n": 2}, None, None, None, ""],
        [{}, None, None, 60, "user-7"],
        [{"n": 4}, expires, 2, None, ""],
    ]


@pytest.mark.django_db
def test_schedule_still_validates_every_field_before_anything_is_written():
    with Recorded() as queries, pytest.raises(ValidationError) as refused:
        schedule(channels=["webhook", "sms"], webhook_url="ftp://x", payload=[1], timezone="Mars/Base")

    assert set(refused.value.message_dict) == {"channels", "webhook_url", "payload", "timezone"}
    assert inserts(queries) == 0


# --- schedule_many(): all or none, in one INSERT -------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_schedule_many_is_one_multi_row_insert_and_one_wake_up():
    with Recorded() as queries:
        rows = schedule_many([{**HOOK, "payload": {"n": n}} for n in range(200)])

    assert inserts(queries) == 1
    assert statements(queries) == ["INSERT", *wake_up()]  # the ids come back with it
    assert len(rows) == 200


@pytest.mark.django_db
def test_a_plain_batch_inside_a_transaction_is_its_insert_alone(django_assert_num_queries):
    """No savepoint around it: one INSERT is all or nothing by itself."""
    with django_assert_num_queries(1):
        schedule_many([{**HOOK, "payload": {"n": n}} for n in range(50)])


@pytest.mark.django_db(transaction=True)
def test_a_batch_that_replaces_rows_still_wakes_the_fast_lane_once():
    schedule(**HOOK, key="a")
    schedule(**HOOK, key="b")
    with Recorded() as queries:
        schedule_many([{**HOOK, "key": "a"}, {**HOOK, "key": "b"}, HOOK, HOOK], on_conflict="replace")

    assert statements(queries).count("NOTIFY") == len(wake_up())
    assert Notification.objects.count() == 4


def test_schedule_many_takes_any_iterable_of_dicts(db):
    rows = schedule_many({**HOOK, "payload": {"n": n}} for n in range(3))

    assert [row.payload for row in rows] == [{"n": 0}, {"n": 1}, {"n": 2}]


@pytest.mark.django_db
def test_schedule_many_returns_the_saved_rows_in_order_with_their_pks():
    rows = schedule_many([{**HOOK, "payload": {"n": n}, "fire_at": NOW + timedelta(minutes=n)} for n in range(30)])

    assert [row.payload for row in rows] == [{"n": n} for n in range(30)]
    assert all(row.pk is not None and not row._state.adding for row in rows)
    stored = dict(Notification.objects.values_list("pk", "payload"))
    assert [stored[row.pk] for row in rows] == [{"n": n} for n in range(30)]
    assert [row.next_fire_at for row in rows] == [NOW + timedelta(minutes=n) for n in range(30)]


@pytest.mark.django_db
def test_rows_carry_their_pks_where_the_insert_cannot_return_them(monkeypatch):
    """MySQL (and SQLite before 3.35) return no ids from a multi-row INSERT: they are read back."""
    monkeypatch.setattr(compat, "can_return_rows_from_bulk_insert", lambda connection: False)
    with Recorded() as queries:
        rows = schedule_many([{**HOOK, "payload": {"n": n}} for n in range(25)])

    assert inserts(queries) == 1
    stored = dict(Notification.objects.values_list("pk", "payload"))
    assert [stored[row.pk] for row in rows] == [{"n": n} for n in range(25)]


@pytest.mark.django_db
def test_one_bad_row_saves_nothing_and_the_error_names_its_index_and_field():
    good = {**HOOK, "payload": {"n": 1}}
    with pytest.raises(ValidationError) as refused:
        schedule_many([good, good, good, {**HOOK, "webhook_url": "ftp://example.com/in"}, good])

    assert list(refused.value.message_dict) == ["3.webhook_url"]
    assert refused.value.message_dict["3.webhook_url"]
    assert Notification.objects.count() == 0


@pytest.mark.django_db
def test_every_bad_row_is_reported_at_once():
    with pytest.raises(ValidationError) as refused:
        schedule_many(
            [
                {**EMAIL, "email_to": "not an address"},
                {**HOOK},
                {**HOOK, "recurrence_rule": "every tuesday", "priority": "urgent"},
            ]
        )

    assert set(refused.value.message_dict) == {"0.email_to", "2.recurrence_rule", "2.priority"}
    assert Notification.objects.count() == 0


@pytest.mark.django_db
def test_an_argument_schedule_does_not_take_is_a_type_error_naming_the_row():
    with pytest.raises(TypeError, match=r"rows\[1\].*colour"):
        schedule_many([HOOK, {**HOOK, "colour": "red"}])
    with pytest.raises(TypeError, match=r"rows\[0\]"):
        schedule_many(["not a dict"])
    with pytest.raises(ValueError, match="on_conflict"):
        schedule_many([HOOK], on_conflict="merge")
    assert schedule_many([]) == []


@pytest.mark.django_db
def test_a_batch_inside_a_transaction_that_rolls_back_leaves_nothing():
    with pytest.raises(RuntimeError), transaction.atomic():
        schedule_many([HOOK, HOOK])
        raise RuntimeError("the caller's own failure")

    assert Notification.objects.count() == 0


@pytest.mark.django_db
@time_machine.travel(NOW, tick=False)
def test_each_row_is_what_schedule_would_have_made_of_it(tmp_path, settings):
    folder = tmp_path / "reminders" / "invoice"
    folder.mkdir(parents=True)
    (folder / "subject.txt").write_text("Invoice {{ number }}")
    (folder / "body.txt").write_text("Pay {{ number }}")
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [tmp_path, *settings.TEMPLATES[0]["DIRS"]]}]
    kinds = [
        {**EMAIL, "attachments": [Attachment("a.txt", b"hello", "text/plain")]},
        {
            "channels": ["email"],
            "email_to": "ada@example.com",
            "template": "reminders/invoice",
            "payload": {"number": 7},
        },
        {**HOOK, "recurrence_rule": "0 9 * * 1-5", "timezone": "Europe/Berlin"},  # first due: the rule's next
        {**HOOK, "quiet_hours": "11:00-14:00", "timezone": "UTC"},  # due now, inside: moved to 14:00
        {**HOOK, "priority": "high", "expires_at": NOW + timedelta(days=1), "max_retries": 5, "backoff": [10]},
    ]
    one_by_one = [schedule(**kind) for kind in kinds]
    together = schedule_many(kinds)

    compared = ["channels", "next_fire_at", "starts_at", "template", "priority", "quiet_hours", "max_retries"]
    for alone, batched in zip(one_by_one, together, strict=True):
        assert [getattr(batched, name) for name in compared] == [getattr(alone, name) for name in compared]
        stored = Notification.objects.get(pk=batched.pk)
        assert [getattr(stored, name) for name in compared] == [getattr(alone, name) for name in compared]
    assert together[2].next_fire_at == datetime(2026, 3, 3, 8, 0, tzinfo=UTC)  # Tuesday 09:00 in Berlin
    assert together[3].next_fire_at == datetime(2026, 3, 2, 14, 0, tzinfo=UTC)
    (attached,) = Notification.objects.get(pk=together[0].pk).attachments
    assert (attached["name"], attached["size"]) == ("a.txt", 5)
    assert storage().open(attached["file"]).read() == b"hello"


def attachment_files() -> set[str]:
    folder = "notifications/attachments"
    return set(storage().listdir(folder)[1]) if storage().exists(folder) else set()


@pytest.mark.django_db
def test_a_refused_batch_stores_no_attachment():
    before = attachment_files()
    with pytest.raises(ValidationError):
        schedule_many([{**EMAIL, "attachments": [Attachment("a.txt", b"x")]}, {**HOOK, "webhook_url": ""}])

    assert Notification.objects.count() == 0
    assert attachment_files() == before


# --- keys ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_error_refuses_a_key_already_stored_naming_the_index_and_saves_nothing():
    schedule(**HOOK, key="k2")

    with pytest.raises(ValidationError) as refused:
        schedule_many([{**HOOK, "key": "k1"}, {**HOOK, "key": "k2"}, HOOK])

    assert refused.value.message_dict == {"1.key": [KEY_TAKEN]}
    assert list(Notification.objects.values_list("key", flat=True)) == ["k2"]


@pytest.mark.django_db
def test_error_refuses_a_key_twice_in_the_batch_on_the_later_index():
    with pytest.raises(ValidationError) as refused:
        schedule_many([{**HOOK, "key": "k"}, HOOK, {**HOOK, "key": "k"}])

    assert refused.value.message_dict == {"2.key": [KEY_TAKEN]}
    assert Notification.objects.count() == 0


@pytest.mark.django_db
def test_replace_gives_a_stored_row_the_new_fields_and_a_fresh_start():
    old = schedule(**HOOK, key="k", payload={"v": "old"})
    Notification.objects.filter(pk=old.pk).update(error_count=2, last_error="webhook: HTTP 503")

    rows = schedule_many([{**HOOK, "key": "k", "payload": {"v": "new"}}, {**HOOK, "key": "j"}], on_conflict="replace")

    stored = Notification.objects.get(key="k")
    assert rows[0].pk == old.pk == stored.pk
    assert (stored.payload, stored.error_count, stored.last_error) == ({"v": "new"}, 0, None)
    assert stored.firing_id != old.firing_id  # a new firing
    assert Notification.objects.count() == 2


@pytest.mark.django_db
def test_replace_within_the_batch_the_later_row_wins_for_every_index_naming_the_key():
    rows = schedule_many(
        [{**HOOK, "key": "k", "payload": {"v": 1}}, HOOK, {**HOOK, "key": "k", "payload": {"v": 2}}],
        on_conflict="replace",
    )

    stored = Notification.objects.get(key="k")
    assert rows[0].pk == rows[2].pk == stored.pk
    assert stored.payload == {"v": 2}
    assert Notification.objects.count() == 2


@pytest.mark.django_db
def test_keep_returns_the_first_row_of_a_key_unchanged():
    old = schedule(**HOOK, key="k", payload={"v": "old"})

    rows = schedule_many(
        [
            {**HOOK, "key": "k", "payload": {"v": "new"}},
            {**HOOK, "key": "j", "payload": {"v": 1}},
            {**HOOK, "key": "j"},
        ],
        on_conflict="keep",
    )

    assert rows[0].pk == old.pk and rows[0].payload == {"v": "old"}
    assert rows[1].pk == rows[2].pk and rows[2].payload == {"v": 1}
    assert dict(Notification.objects.values_list("key", "payload")) == {"k": {"v": "old"}, "j": {"v": 1}}


@pytest.mark.django_db
def test_a_rows_own_on_conflict_overrides_the_batchs():
    schedule(**HOOK, key="k", payload={"v": "old"})

    rows = schedule_many([{**HOOK, "key": "k", "payload": {"v": "new"}, "on_conflict": "keep"}])

    assert rows[0].payload == {"v": "old"}


@pytest.mark.django_db
def test_keyed_batches_ask_the_database_once_for_the_keys():
    schedule(**HOOK, key="k0")
    with Recorded() as queries:
        schedule_many([{**HOOK, "key": f"k{n}"} for n in range(1, 50)], on_conflict="keep")

    assert statements(queries) == ["SELECT", "INSERT"]


# --- the queued email backend ----------------------------------------------------------------


@pytest.mark.django_db
@override_settings(EMAIL_BACKEND="notifications.mail.QueuedEmailBackend")
def test_send_mass_mail_queues_every_message_with_one_insert_at_commit(django_capture_on_commit_callbacks):
    messages = [(f"Newsletter {n}", "Hello", "news@example.com", [f"reader{n}@example.com"]) for n in range(40)]

    with Recorded() as queries, django_capture_on_commit_callbacks(execute=True):
        sent = mail.send_mass_mail(messages)
        assert Notification.objects.count() == 0  # not before the commit

    assert sent == 40
    # One INSERT of the rows, one of who they name (erasure's index, models.address_keys).
    assert inserts(queries, "notifications_notification") == inserts(queries, "notifications_addresskey") == 1
    rows = list(Notification.objects.order_by("pk"))
    assert [(row.subject, row.email_to) for row in rows] == [
        (f"Newsletter {n}", [f"reader{n}@example.com"]) for n in range(40)
    ]
