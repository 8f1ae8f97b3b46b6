"""`schedule(key=..., on_conflict=...)`: one row per key, and what a second call does.

The race between processes is tests/test_key_race.py; here the policies one by one, and
a replace or cancel while a firing of the row is in flight: the old firing's write-back
(fenced by the claim token) changes nothing.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.forms import modelform_factory
from django.utils import timezone

from notifications.api import cancel, run_tick, schedule
from notifications.models import DeliveryAttempt, Notification, State
from notifications.models.validation import KEY_TAKEN
from tests.support.servers import HeldTick

NOW = datetime(2030, 1, 15, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
KEY = "invoice-7-reminder"
EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Invoice 7", "body": "Due soon."}


def stored(row: Notification) -> dict:
    return {f.attname: getattr(row, f.attname) for f in Notification._meta.concrete_fields}


# --- one call after another ---------------------------------------------------------------


@pytest.mark.django_db
class TestPolicies:
    def test_the_key_is_saved_and_blank_means_none(self):
        row = schedule(**EMAIL, key=KEY)
        assert Notification.objects.get(pk=row.pk).key == KEY
        # Rows without a key never conflict.
        assert schedule(**EMAIL).key == schedule(**EMAIL).key == ""
        assert Notification.objects.filter(key="").count() == 2

    def test_keys_are_compared_exactly_case_accents_and_trailing_spaces_count(self):
        # As on PostgreSQL, on every database: MariaDB/MySQL compare the key byte for byte
        # (a site's default collation would fold case and accents, and ignore trailing spaces).
        keys = ["Invoice-7", "invoice-7", "invoice-7 ", "invoicé-7"]
        rows = [schedule(**EMAIL, key=key) for key in keys]

        assert sorted(Notification.objects.values_list("key", flat=True)) == sorted(keys)
        assert Notification.objects.get(key="invoice-7").pk == rows[1].pk
        assert cancel("INVOICE-7") is False
        assert schedule(**{**EMAIL, "subject": "Kept"}, key="invoice-7", on_conflict="keep").pk == rows[1].pk

    def test_the_database_refuses_a_second_row_with_a_key_however_it_is_written(self):
        schedule(**EMAIL, key=KEY)
        with pytest.raises(IntegrityError), transaction.atomic():
            Notification.objects.bulk_create([Notification(**EMAIL, key=KEY)])  # no validation on this path
        Notification.objects.bulk_create([Notification(**EMAIL), Notification(**EMAIL)])  # blank: no key
        assert Notification.objects.filter(key="").count() == 2

    def test_error_is_the_default_a_validation_error_on_key(self):
        first = schedule(**EMAIL, key=KEY)
        for on_conflict in ({}, {"on_conflict": "error"}):
            with pytest.raises(ValidationError) as info:
                schedule(**{**EMAIL, "subject": "Another"}, key=KEY, **on_conflict)
            assert info.value.message_dict == {"key": [KEY_TAKEN]}
            assert info.value.error_dict["key"][0].code == "unique"
        assert list(Notification.objects.values_list("pk", "subject")) == [(first.pk, "Invoice 7")]

    def test_a_plain_save_or_a_model_form_reports_a_taken_key_on_key(self):
        first = schedule(**EMAIL, key=KEY)

        with pytest.raises(ValidationError) as info:
            Notification(**EMAIL, key=KEY, next_fire_at=NOW).save()
        assert info.value.message_dict == {"key": [KEY_TAKEN]}

        form_class = modelform_factory(Notification, fields=["channels", "email_to", "subject", "body", "key"])
        form = form_class(data={**EMAIL, "channels": '["email"]', "key": KEY})
        assert not form.is_valid()
        assert form.errors == {"key": [KEY_TAKEN]}
        first.subject = "Edited"
        first.save()  # its own key is not a conflict
        assert Notification.objects.get(pk=first.pk).subject == "Edited"

    def test_keep_returns_the_existing_row_unchanged(self):
        first = schedule(**EMAIL, key=KEY, fire_at=NOW)
        before = stored(Notification.objects.get(pk=first.pk))

        kept = schedule(**{**EMAIL, "subject": "Another"}, key=KEY, on_conflict="keep", fire_at=NOW + HOUR)

        assert kept.pk == first.pk and kept.subject == "Invoice 7"
        assert stored(Notification.objects.get(pk=first.pk)) == before
        assert Notification.objects.count() == 1

    def test_replace_gives_the_same_row_the_new_fields_and_a_fresh_start(self):
        first = schedule(**EMAIL, key=KEY, payload={"invoice": 7}, fire_at=NOW)
        # A row with a past: failed, expired, paused and claimed by a tick right now.
        Notification.objects.filter(pk=first.pk).update(
            error_count=3,
            last_error="partial: email",
            failed_channels=["email"],
            pending_channels=["email"],
            dead_lettered_at=NOW,
            expired_at=NOW,
            paused_at=NOW,
            last_fired_at=NOW,
            claim_token=uuid.uuid4(),
            claimed_until=timezone.now() + HOUR,
        )
        old = Notification.objects.get(pk=first.pk)

        replaced = schedule(
            channels=["webhook"],
            webhook_url="https://example.com/hooks",
            key=KEY,
            on_conflict="replace",
            fire_at=NOW + HOUR,
        )

        fresh = Notification.objects.get(pk=first.pk)
        assert replaced.pk == first.pk and stored(replaced) == stored(fresh)
        assert (fresh.channels, fresh.webhook_url, fresh.email_to, fresh.payload) == (
            ["webhook"],
            "https://example.com/hooks",
            "",  # the new fields whole: what the call did not give is the default
            {},
        )
        assert fresh.next_fire_at == NOW + HOUR
        assert (fresh.error_count, fresh.last_error, fresh.dead_lettered_at, fresh.expired_at) == (0, None, None, None)
        assert (fresh.failed_channels, fresh.pending_channels, fresh.paused_at) == (None, None, None)
        assert (fresh.claim_token, fresh.claimed_until) == (None, None)
        assert fresh.firing_id != old.firing_id  # a new firing: a new webhook-id
        assert (fresh.created_at, fresh.last_fired_at) == (old.created_at, old.last_fired_at)  # its history
        assert fresh.updated_at > old.updated_at
        assert Notification.objects.count() == 1

    @time_machine.travel(NOW, tick=False)
    def test_replace_without_fire_at_is_due_now_or_at_the_rules_next_occurrence(self):
        schedule(**EMAIL, key="one-shot", fire_at=NOW + HOUR)
        schedule(**EMAIL, key="recurring", fire_at=NOW + HOUR)

        assert schedule(**EMAIL, key="one-shot", on_conflict="replace").next_fire_at == NOW
        recurring = schedule(
            **EMAIL, key="recurring", on_conflict="replace", recurrence_rule="0 9 * * *", timezone="Europe/Berlin"
        )
        assert recurring.next_fire_at == datetime(2030, 1, 16, 8, tzinfo=UTC)
        assert recurring.starts_at == recurring.next_fire_at  # the rule starts at its first firing

    @pytest.mark.parametrize("on_conflict", ["replace", "keep"])
    def test_replace_and_keep_create_the_row_when_there_is_none(self, on_conflict):
        row = schedule(**EMAIL, key=KEY, on_conflict=on_conflict, fire_at=NOW)
        assert list(Notification.objects.values_list("pk", "key", "next_fire_at")) == [(row.pk, KEY, NOW)]

    @pytest.mark.parametrize("on_conflict", ["replace", "keep"])
    def test_fields_are_validated_before_the_key_is_looked_at(self, on_conflict):
        first = schedule(**EMAIL, key=KEY)
        before = stored(Notification.objects.get(pk=first.pk))
        with pytest.raises(ValidationError) as info:
            schedule(channels=["sms"], key=KEY, on_conflict=on_conflict)
        assert list(info.value.message_dict) == ["channels"]
        assert stored(Notification.objects.get(pk=first.pk)) == before

    def test_a_key_is_at_most_200_characters(self):
        assert schedule(**EMAIL, key="k" * 200).key == "k" * 200
        with pytest.raises(ValidationError) as info:
            schedule(**EMAIL, key="k" * 201)
        assert info.value.message_dict == {"key": ["Ensure this value has at most 200 characters (it has 201)."]}
        assert Notification.objects.count() == 1

    @pytest.mark.parametrize("on_conflict", ["update", "", None, "Replace"])
    def test_an_unknown_on_conflict_is_refused_before_anything_is_saved(self, on_conflict):
        with pytest.raises(ValueError, match=r"on_conflict must be 'error' or 'replace' or 'keep', not"):
            schedule(**EMAIL, key=KEY, on_conflict=on_conflict)
        assert not Notification.objects.exists()

    @pytest.mark.parametrize(("on_conflict", "subject"), [("keep", "Invoice 7"), ("replace", "Lost the race")])
    def test_a_lost_race_inside_the_callers_transaction_leaves_it_usable(self, monkeypatch, on_conflict, subject):
        """The insert runs in a savepoint: refused by the constraint (the look for the key
        missed the winner), the call applies its policy and the caller's transaction goes on."""
        winner = schedule(**EMAIL, key=KEY)
        real_first = QuerySet.first
        looks: list[int] = []

        def first_misses_once(self):
            looks.append(1)
            return None if len(looks) == 1 else real_first(self)

        monkeypatch.setattr(QuerySet, "first", first_misses_once)
        with transaction.atomic():
            row = schedule(**{**EMAIL, "subject": "Lost the race"}, key=KEY, on_conflict=on_conflict)
            assert Notification.objects.count() == 1  # the transaction still works
        assert len(looks) == 2  # looked, inserted, was refused, looked again
        assert row.pk == winner.pk
        assert Notification.objects.get().subject == subject


# --- a firing in flight ---------------------------------------------------------------------


@pytest.fixture
def slow_deadline(settings):
    settings.NOTIFICATIONS_CHANNEL_TIMEOUT = 30  # the held request must not time out


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_deadline")
@pytest.mark.parametrize("status", [200, 503], ids=["would-delete", "would-retry"])
def test_a_replace_while_a_firing_is_in_flight_is_not_overwritten_by_it(webhook_server, status):
    row = schedule(channels=["webhook"], webhook_url=webhook_server.url("/old"), key=KEY)
    old_id = f"msg_{row.firing_id}"
    tick = HeldTick(webhook_server, status)

    replaced = schedule(
        channels=["webhook"], webhook_url=webhook_server.url("/new"), key=KEY, on_conflict="replace", fire_at=None
    )
    after_replace = stored(Notification.objects.get(pk=row.pk))
    tick.finish()

    # The old firing's outcome (a delete, or a retry) wrote nothing back.
    assert stored(Notification.objects.get(pk=row.pk)) == after_replace
    assert replaced.pk == row.pk and replaced.state() == State.DUE
    # Its attempt is history all the same.
    assert DeliveryAttempt.objects.filter(notification_id=row.pk, firing_id=row.firing_id).count() == 1

    # The next tick sends the new firing: the new URL, a new webhook-id.
    webhook_server.responder = None
    assert run_tick().counts()["succeeded"] == 1
    old, new = webhook_server.received
    assert (old.path, old.headers["webhook-id"]) == ("/old", old_id)
    assert (new.path, new.headers["webhook-id"]) == ("/new", f"msg_{replaced.firing_id}")
    assert not Notification.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_deadline")
@pytest.mark.parametrize("status", [200, 503], ids=["would-delete", "would-retry"])
def test_a_cancel_while_a_firing_is_in_flight_is_not_undone_by_it(webhook_server, status):
    row = schedule(channels=["webhook"], webhook_url=webhook_server.url("/old"), key=KEY)
    tick = HeldTick(webhook_server, status)

    assert cancel(KEY) is True
    # The key is free again at once; a new row takes it while the old firing is out.
    again = schedule(channels=["webhook"], webhook_url=webhook_server.url("/new"), key=KEY, fire_at=NOW)
    before = stored(Notification.objects.get(pk=again.pk))
    tick.finish()

    assert not Notification.objects.filter(pk=row.pk).exists()  # not brought back by a retry
    assert list(Notification.objects.all()) == [again]
    assert stored(Notification.objects.get(pk=again.pk)) == before
