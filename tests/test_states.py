"""Each state is defined once (`notifications.models.states`), as a `Q` and as a predicate on one
row: they must agree on every combination of the columns a state reads, on each database.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from notifications.api import requeue, run_tick
from notifications.health.queue import queue_health
from notifications.models import Notification, State, states

pytestmark = pytest.mark.django_db

NOW = datetime(2030, 1, 15, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)

# Every value each column a state reads can take, as far as states tell them apart.
COLUMNS = {
    "dead_lettered_at": [None, NOW - timedelta(hours=1)],
    "failed_channels": [None, ["webhook"], []],  # [] only from a migrated `partial: ` naming nothing
    "error_count": [0, 1, 3],
    "next_fire_at": [None, NOW - MINUTE, NOW, NOW + MINUTE],
    "paused_at": [None, NOW - timedelta(hours=2)],
    "expired_at": [None, NOW - timedelta(hours=3)],
    "digest_id": [None, uuid.UUID(int=7)],  # in a digest, or not
    "escalation_of": [None, uuid.UUID(int=8)],  # waiting as an escalation, or not
}


@pytest.fixture
def every_combination(db) -> list[Notification]:
    rows = [
        Notification(
            channels=["email", "webhook"], email_to="ada@example.com", **dict(zip(COLUMNS, values, strict=True))
        )
        for values in itertools.product(*COLUMNS.values())
    ]
    Notification.objects.bulk_create(rows)  # as raw SQL would: no validation, any combination
    return list(Notification.objects.order_by("pk"))


def test_the_query_and_the_predicate_agree_on_every_row(every_combination):
    in_memory = {row.pk: row.state(NOW) for row in every_combination}

    for state in State:
        in_database = set(Notification.objects.in_state(state, NOW).values_list("pk", flat=True))
        assert in_database == {pk for pk, s in in_memory.items() if s == state}, state


def test_every_row_is_in_exactly_one_state(every_combination):
    seen = [pk for state in State for pk in Notification.objects.in_state(state, NOW).values_list("pk", flat=True)]
    assert sorted(seen) == sorted(row.pk for row in every_combination)
    assert {row.state(NOW) for row in every_combination} == set(State)  # the combinations reach every state


def test_health_counts_each_state_with_the_same_conditions(every_combination):
    counts = queue_health(now=NOW).counts
    assert counts == {state.value: sum(row.state(NOW) == state for row in every_combination) for state in State}


@pytest.mark.parametrize(
    ("columns", "expected"),
    [
        ({"next_fire_at": NOW}, State.DUE),  # due at its instant
        ({"next_fire_at": NOW + MINUTE}, State.SCHEDULED),
        ({"next_fire_at": NOW + MINUTE, "escalation_of": uuid.UUID(int=8)}, State.ESCALATION),
        ({"next_fire_at": NOW, "escalation_of": uuid.UUID(int=8)}, State.DUE),  # its deadline came
        ({"next_fire_at": None}, State.PARKED),
        ({"error_count": 1, "next_fire_at": NOW + MINUTE}, State.RETRYING),
        ({"failed_channels": ["webhook"], "next_fire_at": None}, State.PARTIAL),
        ({"failed_channels": ["webhook"], "error_count": 1}, State.PARTIAL),
        ({"dead_lettered_at": NOW, "failed_channels": ["webhook"]}, State.DEAD),
        ({"dead_lettered_at": NOW, "next_fire_at": NOW + MINUTE}, State.DEAD),  # a recurring row skipped forward
        # Paused wins over everything else the row holds; an expired firing comes next.
        ({"paused_at": NOW, "next_fire_at": NOW - MINUTE}, State.PAUSED),
        ({"paused_at": NOW, "dead_lettered_at": NOW, "expired_at": NOW, "failed_channels": ["webhook"]}, State.PAUSED),
        ({"paused_at": NOW, "error_count": 1, "next_fire_at": NOW + MINUTE}, State.PAUSED),
        ({"expired_at": NOW, "dead_lettered_at": NOW, "next_fire_at": None}, State.EXPIRED),  # one-shot, kept
        ({"expired_at": NOW, "next_fire_at": NOW + MINUTE}, State.EXPIRED),  # recurring, moved on
        ({"expired_at": NOW, "failed_channels": ["webhook"], "error_count": 1}, State.EXPIRED),
    ],
)
def test_states_read_the_columns_in_this_order(columns, expected):
    row = Notification(channels=["email"], **{"error_count": 0, **columns})
    assert row.state(NOW) == expected
    assert states.state_of(row, NOW) == expected


def test_an_unknown_state_is_refused():
    with pytest.raises(ValueError, match="unknown state 'stuck'"):
        Notification.objects.in_state("stuck")


def test_the_tick_and_requeue_write_the_columns_the_states_read(make_row, webhook_server):
    """A partial failure, its requeue and the next firing, read back by query and in memory."""
    webhook_server.reply.status = 503
    row = make_row(channels=["email", "webhook"], webhook_url=webhook_server.url(), recurrence_rule="*/5 * * * *")
    Notification.objects.filter(pk=row.pk).update(next_fire_at=timezone.now() - MINUTE)

    def read_back(expected: State) -> Notification:
        fresh = Notification.objects.get(pk=row.pk)
        assert fresh.state() == expected
        assert Notification.objects.in_state(expected).filter(pk=row.pk).exists(), expected
        return fresh

    run_tick()  # the email goes, the webhook fails
    partial = read_back(State.PARTIAL)
    assert (partial.failed_channels, partial.last_error, partial.pending_channels) == (
        ["webhook"],
        "partial: webhook",
        None,
    )

    assert requeue([partial]).changed == 1
    requeued = read_back(State.DUE)
    assert (requeued.pending_channels, requeued.failed_channels, requeued.last_error) == (["webhook"], None, None)

    webhook_server.reply.status = 200
    run_tick()  # the webhook alone, then back on the schedule owing every channel
    done = read_back(State.SCHEDULED)
    assert (done.pending_channels, done.failed_channels, done.last_error) == (None, None, None)
    assert done.owed_channels == ["email", "webhook"]
    # Written back as SQL NULL (not JSON null), which is what the conditions test.
    assert Notification.objects.filter(pk=row.pk, pending_channels__isnull=True, failed_channels__isnull=True).exists()


def test_a_full_failure_after_a_partial_one_is_retrying_not_partial(make_row, webhook_server):
    webhook_server.reply.status = 503
    row = make_row(channels=["email", "webhook"], webhook_url=webhook_server.url(), recurrence_rule="*/5 * * * *")
    Notification.objects.filter(pk=row.pk).update(next_fire_at=timezone.now() - MINUTE)
    run_tick()
    assert Notification.objects.get(pk=row.pk).state() == State.PARTIAL

    Notification.objects.filter(pk=row.pk).update(next_fire_at=timezone.now() - MINUTE, channels=["webhook"])
    run_tick()  # the only channel fails: a full failure, retried

    fresh = Notification.objects.get(pk=row.pk)
    assert fresh.state() == State.RETRYING
    assert fresh.failed_channels is None and fresh.last_error == "webhook: HTTP 503"
    assert Notification.objects.in_state(State.RETRYING).filter(pk=row.pk).exists()
