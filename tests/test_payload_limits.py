"""Payload size and depth limits, and a body size limit: on save, in the tick and in the admin.

A payload is at most NOTIFICATIONS_MAX_PAYLOAD_BYTES (64 KiB) as compact JSON and at most
MAX_PAYLOAD_DEPTH levels deep; a body at most MAX_BODY_BYTES. Rows that bypassed validation
are dead-lettered by the tick; the admin list never loads payloads or bodies.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.core import mail
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from notifications.admin import subjects
from notifications.admin.forms import NotificationForm
from notifications.api import run_tick, schedule
from notifications.conf import Defaults
from notifications.models import Notification, validation
from notifications.models.validation import MAX_BODY_BYTES, MAX_PAYLOAD_DEPTH, field_errors
from tests.support.admin_forms import change_form, change_url
from tests.support.timing import GUARD_SECONDS

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/notifications/notification/"
EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Hi", "body": "Hello"}
TABLE = Notification._meta.db_table
TOO_LARGE = "The payload is larger than 65,536 bytes of compact JSON (NOTIFICATIONS_MAX_PAYLOAD_BYTES)."
TOO_LARGE_100 = "The payload is larger than 100 bytes of compact JSON (NOTIFICATIONS_MAX_PAYLOAD_BYTES)."


def nested(depth: int) -> dict:
    """An object `depth` levels deep ({"a": {"a": ... {}}}), built without recursion."""
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def depth() -> int:
    """The deepest payload allowed: MAX_PAYLOAD_DEPTH, one less on MariaDB (whose JSON_VALID()
    refuses 32 levels)."""
    return validation.max_payload_depth()


def too_deep() -> str:
    return f"The payload is nested deeper than {depth()} levels."


def nested_text(depth: int) -> str:
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def compact_size(payload: dict) -> int:
    return len(json.dumps(payload, separators=(",", ":")))


def payload_messages(payload) -> list[str]:
    before = Notification.objects.count()
    with pytest.raises(ValidationError) as caught:
        schedule(**EMAIL, payload=payload)
    assert Notification.objects.count() == before
    return caught.value.message_dict["payload"]


# --- on save --------------------------------------------------------------------------------------


def test_the_default_limit_is_64_kib():
    assert Defaults.MAX_PAYLOAD_BYTES == 64 * 1024


@override_settings(NOTIFICATIONS_MAX_PAYLOAD_BYTES=100)
def test_a_payload_up_to_the_limit_is_saved_and_one_byte_more_is_refused():
    at_limit = {"a": "x" * 92}
    assert compact_size(at_limit) == 100
    assert schedule(**EMAIL, payload=at_limit).payload == at_limit

    assert payload_messages({"a": "x" * 93}) == [TOO_LARGE_100]


@override_settings(NOTIFICATIONS_MAX_PAYLOAD_BYTES=100)
def test_the_size_is_that_of_the_json_the_webhook_sends():
    # Compact separators; non-ASCII escaped as the webhook body carries it (6 bytes each).
    spaced = {"k": [1, 2, 3], "l": {"m": None, "n": True}, "s": "y" * 56}
    assert compact_size(spaced) == 100 < len(json.dumps(spaced))
    schedule(**EMAIL, payload=spaced)
    assert len(json.dumps({"a": "€" * 15}, ensure_ascii=False).encode()) < 100 < compact_size({"a": "€" * 16})
    assert payload_messages({"a": "€" * 16}) == [TOO_LARGE_100]


def test_a_10_mb_payload_is_refused_quickly_naming_the_limit():
    huge = {f"k{i}": "x" * 1000 for i in range(10_000)}  # ~10 MB
    started = time.monotonic()
    messages = payload_messages(huge)
    assert messages == [TOO_LARGE]
    # A guard against work that grows with the payload's shape (a walk per key), not a
    # timing: it takes well under 1 s, and a loaded CI machine must not make it flake.
    assert time.monotonic() - started < GUARD_SECONDS


def test_many_small_values_count_too():
    assert payload_messages({"list": [0] * 40_000}) == [TOO_LARGE]


@override_settings(NOTIFICATIONS_MAX_PAYLOAD_BYTES="64k")
def test_a_misconfigured_limit_falls_back_to_the_default_instead_of_crashing():
    schedule(**EMAIL, payload={"a": "x" * 1000})
    assert validation.max_payload_bytes() == 64 * 1024


def test_a_payload_may_nest_32_levels_and_no_more_31_on_mariadb():
    assert MAX_PAYLOAD_DEPTH == 32
    assert depth() == (31 if connection.vendor == "mysql" and connection.mysql_is_mariadb else 32)
    assert schedule(**EMAIL, payload=nested(depth())).payload == nested(depth())
    assert payload_messages(nested(depth() + 1)) == [too_deep()]
    assert payload_messages({"list": [[[[{}]]]], "deep": [nested(depth() - 1)]}) == [too_deep()]


@pytest.mark.parametrize("depth", [33, 900, 5_000, 100_000])
def test_the_depth_check_never_recurses(depth):
    row = Notification(**EMAIL, payload=nested(depth))
    assert field_errors(row) == {"payload": [too_deep()]}
    with pytest.raises(ValidationError) as caught:
        validation.validate(row)
    assert caught.value.message_dict == {"payload": [too_deep()]}


def test_schedule_refuses_a_5000_deep_payload_without_recursion_error():
    assert payload_messages(nested(5_000)) == [too_deep()]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"when": datetime(2030, 1, 1, tzinfo=UTC)}, "Object of type datetime is not JSON serializable"),
        ({"ratio": float("nan")}, "Out of range float values are not JSON compliant"),
        ({"tags": {"a", "b"}}, "Object of type set is not JSON serializable"),
    ],
)
def test_a_payload_of_values_json_cannot_carry_is_a_validation_error(payload, message):
    # Django's own field check may add its generic "Value must be valid JSON." first.
    # Python 3.13 names the value after the reason ("...not JSON compliant: nan").
    texts = payload_messages(payload)
    assert any(text.startswith(f"The payload must hold only JSON values: {message}") for text in texts), texts


def test_the_body_is_bounded_in_utf8_bytes():
    assert schedule(**{**EMAIL, "body": "x" * MAX_BODY_BYTES}).body == "x" * MAX_BODY_BYTES
    for body in ("x" * (MAX_BODY_BYTES + 1), "é" * (MAX_BODY_BYTES // 2 + 1), "x" * 10_000_000):
        with pytest.raises(ValidationError) as caught:
            schedule(**{**EMAIL, "body": body})
        assert caught.value.message_dict == {"body": ["The body is larger than 65,536 bytes."]}
    # Whatever the channels: a webhook-only row carries its body through every tick too.
    with pytest.raises(ValidationError) as caught:
        schedule(channels=["webhook"], webhook_url="https://example.com/h", body="x" * (MAX_BODY_BYTES + 1))
    assert caught.value.message_dict == {"body": ["The body is larger than 65,536 bytes."]}


# --- in the tick ----------------------------------------------------------------------------------


def test_rows_over_the_limits_written_around_validation_are_dead_lettered_and_the_rest_delivered():
    now = timezone.now()
    rows = [
        Notification(**EMAIL, payload={"blob": "x" * (64 * 1024)}, next_fire_at=now - timedelta(minutes=3)),
        Notification(**EMAIL, payload=nested(40), next_fire_at=now - timedelta(minutes=2)),
        Notification(**{**EMAIL, "body": "x" * (MAX_BODY_BYTES + 1)}, next_fire_at=now - timedelta(minutes=1)),
    ]
    storable_too_deep = depth() == MAX_PAYLOAD_DEPTH  # MariaDB's JSON_VALID() refuses the row
    if not storable_too_deep:
        del rows[1]
    bad = Notification.objects.bulk_create(rows)
    healthy = schedule(**{**EMAIL, "email_to": "healthy@example.com"}, payload={"ok": True}, fire_at=now)

    report = run_tick()

    assert report.counts()["dead_lettered"] == len(bad)
    assert report.counts()["succeeded"] == 1
    errors = [Notification.objects.get(pk=row.pk) for row in bad]
    assert [row.last_error for row in errors] == [
        f"invalid: payload: {TOO_LARGE}",
        *([f"invalid: payload: {too_deep()}"] if storable_too_deep else []),
        "invalid: body: The body is larger than 65,536 bytes.",
    ]
    assert all(row.dead_lettered_at is not None and row.next_fire_at is None for row in errors)
    assert [m.to for m in mail.outbox] == [["healthy@example.com"]]
    assert not Notification.objects.filter(pk=healthy.pk).exists()  # one-shot, delivered


def test_a_raw_sql_row_over_the_limit_is_dead_lettered():
    row = schedule(**EMAIL, fire_at=timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {TABLE} SET payload = %s WHERE id = %s", [json.dumps({"b": "y" * 70_000}), row.pk])
    run_tick()
    row.refresh_from_db()
    assert row.last_error == f"invalid: payload: {TOO_LARGE}"
    assert mail.outbox == []


# --- in the admin ---------------------------------------------------------------------------------


def selected_columns(queries) -> str:
    return "\n".join(q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("SELECT"))


def test_the_changelist_and_its_actions_never_select_payloads_or_bodies(admin_client):
    """Never a body or a secret; a payload only for a list row whose subject is a template
    (`admin.subjects`, which renders it): these rows' plain subjects load none."""
    rows = [
        schedule(**EMAIL, payload={"blob": "p" * 60_000}, fire_at=timezone.now() + timedelta(hours=1)) for _ in range(3)
    ]
    admin_client.get(CHANGELIST)  # warm caches

    with CaptureQueriesContext(connection) as listing:
        response = admin_client.get(CHANGELIST)
    with CaptureQueriesContext(connection) as filtered:
        admin_client.get(CHANGELIST, {"state": "scheduled", "q": "ada"})
    with CaptureQueriesContext(connection) as confirming:
        confirmation = admin_client.post(CHANGELIST, {"action": "purge", "_selected_action": [r.pk for r in rows]})

    assert response.status_code == 200 and confirmation.status_code == 200
    assert all(f'value="{row.pk}"' in response.content.decode() for row in rows)
    quote = connection.ops.quote_name
    payload = f"{quote(TABLE)}.{quote('payload')}"
    for queries in (listing, filtered, confirming):
        sql = selected_columns(queries)
        assert f"{quote(TABLE)}.{quote('channels')}" in sql  # the rows were read...
        # ...without their payloads: a list names it only for the rows whose subject is a template
        assert sql.count(payload) == sql.count(f"THEN {payload}")
        assert f"{quote(TABLE)}.{quote('body')}" not in sql
        assert f"{quote(TABLE)}.{quote('webhook_secret')}" not in sql
    assert "p" * 1000 not in response.content.decode()
    listed = response.context["cl"].result_list
    assert [getattr(row, subjects.ANNOTATION) for row in listed] == [None, None, None]  # "Hi": none loaded


@pytest.mark.parametrize("depth", [33, 500, 950, 5_000])
def test_the_change_form_refuses_deep_payloads_without_a_500(admin_client, depth):
    row = schedule(**EMAIL, payload={"kept": 1})
    response = admin_client.post(change_url(row), change_form(row, payload=nested_text(depth)))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert errors["payload"] == [too_deep()]
    row.refresh_from_db()
    assert row.payload == {"kept": 1}


@override_settings(NOTIFICATIONS_MAX_PAYLOAD_BYTES=1000)
def test_the_change_form_refuses_a_payload_over_the_limit(admin_client):
    row = schedule(**EMAIL, payload={"kept": 1})
    response = admin_client.post(change_url(row), change_form(row, payload=json.dumps({"a": "x" * 2000})))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["payload"] == [
        "The payload is larger than 1,000 bytes of compact JSON (NOTIFICATIONS_MAX_PAYLOAD_BYTES)."
    ]


def test_the_admin_form_refuses_deep_payloads_when_adding():
    form = NotificationForm(data={**EMAIL, "timezone": "UTC", "payload": nested_text(2_000)})
    assert not form.is_valid()
    assert form.errors["payload"] == [too_deep()]


def write_payload(row: Notification, text: str, on_postgres: bool) -> None:
    """Raw SQL, as another program sharing the database might write it."""
    cast = "::jsonb" if on_postgres else ""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"UPDATE {TABLE} SET payload = %s{cast} WHERE id = %s", [text, row.pk])
    except IntegrityError:
        # SQLite's JSON_VALID() check (Django's JSONField constraint) refuses JSON nested
        # deeper than its parser's limit (2,000 levels in SQLite 3.40): such a row cannot exist.
        assert not on_postgres
        pytest.skip("this database refuses JSON nested this deep")


def viewer() -> User:
    user = User.objects.create_user("viewer", "viewer@example.com", "pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename="view_notification"))
    return user


@pytest.mark.parametrize("depth", [40, 950, 1_999, 5_000])
def test_a_row_with_a_payload_too_deep_to_show_opens_with_a_warning_and_can_be_repaired(
    admin_client, client, on_postgres, depth
):
    row = schedule(**EMAIL, payload={"a": 1})
    write_payload(row, nested_text(depth), on_postgres)

    for who in (admin_client, client):
        if who is client:
            client.force_login(viewer())
        page = who.get(change_url(row))
        assert page.status_code == 200
        html = page.content.decode()
        assert "stored payload cannot be shown" in html
        assert who.get(reverse("admin:notifications_notification_history", args=[row.pk])).status_code == 200
        listing = who.get(CHANGELIST)
        assert listing.status_code == 200 and f'href="{change_url(row)}"' in listing.content.decode()

    # Saving without a new payload is refused; a new payload repairs the row.
    kept = admin_client.post(change_url(row), change_form(row, payload="null"))
    assert kept.status_code == 200
    assert kept.context["adminform"].form.errors["payload"] == ["The payload must be a JSON object."]
    repaired = admin_client.post(change_url(row), change_form(row, payload='{"fixed": true}'))
    assert repaired.status_code == 302
    row = Notification.objects.get(pk=row.pk)
    assert row.payload == {"fixed": True}
