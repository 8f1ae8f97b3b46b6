"""Migration 0004 moves row state into columns: the owed channels from comma-separated text
to a JSON list, the channels of a partial failure out of `last_error`. Forwards and back.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from notifications.models import Notification, State

BEFORE = [("notifications", "0003_tickrun_clock_offset")]
AFTER = [("notifications", "0004_state_columns")]

# name: (pending_channels, last_error) before -> (pending_channels, failed_channels) after
ROWS = {
    "clean": (("", None), (None, None)),
    "requeued partial": (("webhook", None), (["webhook"], None)),
    "retrying, owing both": (("email,webhook", "webhook: HTTP 503"), (["email", "webhook"], None)),
    "partial": (("", "partial: webhook"), (None, ["webhook"])),
    "partial of two": (("", "partial: email, webhook"), (None, ["email", "webhook"])),
    "partial naming nothing": (("", "partial: "), (None, [])),  # still a partial failure, as it was
    "error mentioning partial": (("", "webhook: partial: content"), (None, None)),
}


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps.get_model("notifications", "Notification")


@pytest.fixture
def at_0003(transactional_db):
    """The schema as of 0003 for the test; the latest again afterwards."""
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("notifications")
    yield migrate(BEFORE)
    migrate(latest)


def test_existing_rows_keep_their_state_forwards_and_back(at_0003):
    Old = at_0003
    pks = {}
    for name, ((pending, error), _) in ROWS.items():
        row = Old.objects.create(
            channels=["email", "webhook"], email_to="ada@example.com", pending_channels=pending, last_error=error
        )
        pks[name] = row.pk

    New = migrate(AFTER)

    converted = {
        pk: (pending, failed)
        for pk, pending, failed in New.objects.values_list("pk", "pending_channels", "failed_channels")
    }
    assert {name: converted[pk] for name, pk in pks.items()} == {name: after for name, (_, after) in ROWS.items()}
    errors = dict(New.objects.values_list("pk", "last_error"))
    assert {name: errors[pk] for name, pk in pks.items()} == {name: before[1] for name, (before, _) in ROWS.items()}
    partial = {pks[name] for name in ("partial", "partial of two", "partial naming nothing")}
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes("notifications"))  # the model's schema
    assert set(Notification.objects.in_state(State.PARTIAL).values_list("pk", flat=True)) == partial

    Old = migrate(BEFORE)

    restored = dict(Old.objects.values_list("pk", "pending_channels"))
    assert {name: restored[pk] for name, pk in pks.items()} == {name: before[0] for name, (before, _) in ROWS.items()}
