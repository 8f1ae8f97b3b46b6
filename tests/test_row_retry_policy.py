"""A row's own `max_retries` and `backoff` override NOTIFICATIONS_MAX_RETRIES and _BACKOFF.

They decide when the row retries and when it is dead-lettered, in the claim query too
(a row with more attempts than the site's keeps being claimed). Blank keeps the site's.
Validated like the settings; a row written around validation is dead-lettered as invalid.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings

from notifications.api import run_tick, schedule
from notifications.conf import Policy
from notifications.models import Notification
from notifications.rules import retry
from tests.support.admin_forms import change_url
from tests.support.servers import Reply

pytestmark = pytest.mark.django_db

T = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
SITE = Policy(max_retries=3, backoff=(60.0, 300.0, 1800.0))


@pytest.fixture(autouse=True)
def clock(time_machine):
    time_machine.move_to(T - timedelta(hours=1), tick=False)


@pytest.fixture
def failing_row(webhook_server):
    """A one-shot (or, with recurrence_rule, recurring) row whose webhook answers 503, due at T."""
    webhook_server.reply = Reply(status=503)

    def make(**fields) -> Notification:
        fields.setdefault("fire_at", T)
        return schedule(channels=["webhook"], webhook_url=webhook_server.url(), **fields)

    return make


def reload(row: Notification) -> Notification:
    return Notification.objects.get(pk=row.pk)


def tried_at(row: Notification, offsets: list[int]) -> list[int]:
    """The offsets (seconds after T) at which a tick attempted `row`."""
    tried = []
    for offset in offsets:
        report = run_tick(now=T + timedelta(seconds=offset))
        if report.counts()["retried"] or report.counts()["dead_lettered"]:
            tried.append(offset)
    return tried


# --- the pure policy ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_retries", "backoff", "expected"),
    [
        (None, None, SITE),
        (5, None, Policy(5, SITE.backoff)),
        (None, [10, 20], Policy(3, (10.0, 20.0))),
        (1, [5], Policy(1, (5.0,))),
        # Values no save lets through (written around validation) keep the site's.
        (0, [], SITE),
        (-1, "60", SITE),
        (True, [True], SITE),
    ],
)
def test_a_rows_policy_overrides_the_sites_where_usable(max_retries, backoff, expected):
    assert SITE.for_row(max_retries, backoff) == expected


@pytest.mark.parametrize(
    ("error_count", "policy", "decision"),
    [
        (0, Policy(1, (60.0,)), retry.DeadLetter(error_count=1)),
        (0, Policy(5, (10.0, 20.0)), retry.Retry(delay=10.0, error_count=1)),
        (3, Policy(5, (10.0, 20.0)), retry.Retry(delay=20.0, error_count=4)),  # the last step repeats
        (4, Policy(5, (10.0, 20.0)), retry.DeadLetter(error_count=5)),
    ],
)
def test_the_retry_decision_follows_the_rows_policy(error_count, policy, decision):
    assert retry.after_failure(error_count, policy.max_retries, policy.backoff) == decision


# --- end to end ------------------------------------------------------------------------------


def test_max_retries_1_dead_letters_at_the_first_failure(failing_row, webhook_server):
    row = failing_row(max_retries=1)

    assert tried_at(row, [0, 60, 3600]) == [0]
    row = reload(row)
    assert (row.error_count, row.next_fire_at, row.dead_lettered_at) == (1, None, T)
    assert len(webhook_server.received) == 1


def test_more_retries_than_the_site_keep_the_row_claimed_past_the_sites_limit(failing_row, webhook_server):
    row = failing_row(max_retries=5)

    # BACKOFF 60, 300, 1800 (repeated): tried at t, +1 min, +6 min, +36 min, +66 min.
    assert tried_at(row, [0, 60, 360, 2159, 2160, 3959, 3960, 86_400]) == [0, 60, 360, 2160, 3960]
    row = reload(row)
    assert (row.error_count, row.next_fire_at, row.dead_lettered_at) == (5, None, T + timedelta(seconds=3960))
    assert len(webhook_server.received) == 5


def test_a_rows_backoff_sets_its_waits(failing_row):
    row = failing_row(backoff=[10, 20])  # the site's 3 attempts

    assert tried_at(row, [0, 9, 10, 29, 30, 3600]) == [0, 10, 30]
    assert (reload(row).error_count, reload(row).dead_lettered_at) == (3, T + timedelta(seconds=30))


def test_both_together_and_rows_without_them_follow_the_site(failing_row):
    own = failing_row(max_retries=4, backoff=[10, 20])
    site = failing_row()

    run_tick(now=T)

    assert (reload(own).next_fire_at, reload(site).next_fire_at) == (
        T + timedelta(seconds=10),
        T + timedelta(seconds=60),
    )
    assert tried_at(own, [10, 30, 50]) == [10, 30, 50]
    assert reload(own).error_count == 4
    assert reload(own).dead_lettered_at == T + timedelta(seconds=50)


@override_settings(NOTIFICATIONS_MAX_RETRIES=2, NOTIFICATIONS_BACKOFF=[1000])
def test_the_row_wins_over_changed_settings(failing_row):
    row = failing_row(max_retries=3, backoff=[15])

    assert tried_at(row, [0, 15, 30]) == [0, 15, 30]
    assert reload(row).error_count == 3


def test_retry_after_stretches_a_wait_up_to_the_rows_last_step(failing_row, webhook_server):
    webhook_server.reply = Reply(status=503, headers={"Retry-After": "45"})
    row = failing_row(backoff=[10, 30])

    run_tick(now=T)

    assert reload(row).next_fire_at == T + timedelta(seconds=30)  # 45 asked, capped at backoff[-1]


def test_a_recurring_row_that_runs_out_of_its_own_retries_skips_forward(failing_row):
    row = failing_row(recurrence_rule="0 10 * * *", timezone="UTC", max_retries=2, backoff=[30])

    assert tried_at(row, [0, 30]) == [0, 30]
    row = reload(row)
    assert (row.dead_lettered_at, row.error_count) == (T + timedelta(seconds=30), 0)
    assert row.next_fire_at == datetime(2025, 3, 1, 10, 0, tzinfo=UTC)  # transient: the schedule goes on


# --- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"max_retries": 0}, "max_retries", "Give at least 1 (attempts of one firing before it is dead-lettered)."),
        ({"backoff": []}, "backoff", "Give a non-empty list of positive seconds, e.g. [60, 300, 1800]."),
        ({"backoff": [60, 0]}, "backoff", "Give a non-empty list of positive seconds, e.g. [60, 300, 1800]."),
        ({"backoff": [60, "300"]}, "backoff", "Give a non-empty list of positive seconds, e.g. [60, 300, 1800]."),
        ({"backoff": [True]}, "backoff", "Give a non-empty list of positive seconds, e.g. [60, 300, 1800]."),
        ({"backoff": 60}, "backoff", "Give a non-empty list of positive seconds, e.g. [60, 300, 1800]."),
        ({"backoff": {"first": 60}}, "backoff", "Give a non-empty list of positive seconds, e.g. [60, 300, 1800]."),
    ],
)
def test_a_bad_policy_is_a_validation_error_naming_the_field(fields, field, message):
    with pytest.raises(ValidationError) as caught:
        schedule(channels=["email"], email_to="ada@example.com", subject="s", body="b", **fields)

    assert caught.value.message_dict == {field: [message]}


def test_a_valid_policy_is_saved(failing_row):
    row = failing_row(max_retries=7, backoff=[5, 10.5])

    assert (reload(row).max_retries, reload(row).backoff) == (7, [5, 10.5])


@pytest.mark.parametrize(
    ("fields", "last_error"),
    [
        ({"max_retries": 0}, "invalid: max_retries: Give at least 1"),
        ({"backoff": [60, -1]}, "invalid: backoff: Give a non-empty list of positive seconds"),
    ],
)
def test_a_policy_written_around_validation_dead_letters_the_row(webhook_server, fields, last_error):
    (row,) = Notification.objects.bulk_create(
        [Notification(channels=["webhook"], webhook_url=webhook_server.url(), next_fire_at=T, **fields)]
    )

    report = run_tick(now=T)

    assert report.counts()["dead_lettered"] == 1
    row = reload(row)
    assert row.last_error.startswith(last_error)
    assert (row.next_fire_at, row.dead_lettered_at, row.error_count) == (None, T, 3)  # the site's MAX_RETRIES
    assert webhook_server.received == []


def test_the_change_page_shows_the_rows_policy(admin_client, failing_row):
    row = failing_row(max_retries=5, backoff=[10, 20])

    page = admin_client.get(change_url(row)).content.decode()

    assert 'name="max_retries" value="5"' in page
    assert "[10, 20]" in page
    assert 'name="expires_at_0"' in page
    assert 'name="max_delay"' in page
