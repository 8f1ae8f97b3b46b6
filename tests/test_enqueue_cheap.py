"""The cheap parts of enqueueing (issue 35) give what the dear ones gave: a row built by
`models.fresh` is `Notification(...)`, `models.cleaning` refuses and converts as Django's
`clean_fields` does, and a batch inserted in one statement (PostgreSQL's UNNEST) stores
every kind of value as a row saved alone would.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db.models import Model, signals

from notifications.api import schedule_many
from notifications.models import Notification, cleaning, fresh, validation

HOOK = {"channels": ["webhook"], "webhook_url": "https://hooks.example.com/in", "payload": {"n": 1}}


def fields_of(row: Notification) -> dict:
    return {f.attname: getattr(row, f.attname) for f in Notification._meta.concrete_fields if f.name != "firing_id"}


def test_a_fresh_row_is_the_row_django_builds():
    given = {**HOOK, "subject": "Hi", "key": "k-1", "max_retries": 3}
    built, cheap = Notification(**given), fresh.new(**given)
    assert fields_of(cheap) == fields_of(built)
    assert isinstance(cheap.firing_id, uuid.UUID) and cheap.firing_id != built.firing_id
    assert cheap._state.adding and cheap._state.db is None and cheap.pk is None
    other = fresh.new(**given)
    assert other.channel_data is not cheap.channel_data  # a mutable default is each row's own
    assert other.firing_id != cheap.firing_id


def test_a_fresh_row_sends_init_signals_when_someone_listens():
    seen = []

    def listener(sender, instance, **kwargs):
        seen.append(instance)

    signals.post_init.connect(listener, sender=Notification)
    try:
        row = fresh.new(**HOOK)
    finally:
        signals.post_init.disconnect(listener, sender=Notification)
    assert seen == [row]


ODD_VALUES = [
    {"subject": "x" * 999},
    {"subject": 12345},
    {"priority": "urgent"},
    {"routing": "some"},
    {"timezone": ""},
    {"channels": []},
    {"webhook_url": "https://exa mple.com/in"},
    {"webhook_url": "https://example.com/" + "p" * 2000},
    {"max_retries": 70_000},
    {"max_delay": -1},
    {"max_delay": "60"},
    {"expires_at": "2026-03-02T12:00:00+00:00"},
    {"expires_at": "not a date"},
    {"payload": {"when": datetime(2026, 1, 1, tzinfo=UTC)}},
    {"headers": {"X-Set": {1, 2}}},
    {"digest_id": "not-a-uuid"},
    {"error_count": None},
]


@pytest.mark.parametrize("odd", ODD_VALUES, ids=lambda odd: next(iter(odd)))
def test_cheap_cleaning_refuses_and_converts_as_django_does(odd):
    dear, cheap = Notification(**{**HOOK, **odd}), Notification(**{**HOOK, **odd})
    try:
        Model.clean_fields(dear)
        dear_errors = None
    except ValidationError as exc:
        dear_errors = exc.message_dict
    try:
        with validation.batch():
            cleaning.clean_fields(cheap)
        cheap_errors = None
    except ValidationError as exc:
        cheap_errors = exc.message_dict
    assert cheap_errors == dear_errors
    assert fields_of(cheap) == fields_of(dear)


@pytest.mark.django_db
def test_a_batch_stores_every_kind_of_value_as_given():
    """NULLs, JSON of every shape (lists, strings, nested objects, none), datetimes, text
    with quotes and non-ASCII: what a batch stores reads back as what was given."""
    due = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
    rows = [
        {**HOOK, "payload": {"nested": {"list": [1, 2.5, None, True, "é"]}, 'quote"s': "a'b"}, "fire_at": due},
        {
            "channels": ["email"],
            "email_to": ["ada@example.com", "bob@example.com"],
            "email_cc": ["cy@example.com"],
            "subject": "Hälló {{ name }}",
            "body": "Body",
            "headers": {"X-Campaign": "spring"},
            "backoff": [60, 300],
            "max_retries": 2,
            "expires_at": due + timedelta(days=1),
        },
        {**HOOK, "payload": {}, "max_delay": 600, "key": "batch-key"},
    ]
    saved = schedule_many(rows)
    stored = {row.pk: row for row in Notification.objects.filter(pk__in=[row.pk for row in saved])}
    for given, row in zip(rows, saved, strict=True):
        back = stored[row.pk]
        for name, value in given.items():
            assert getattr(back, "next_fire_at" if name == "fire_at" else name) == value, name
        assert back.message is None and back.pending_channels is None and back.backoff == given.get("backoff")
        assert back.firing_id == row.firing_id and back.created_at is not None
