"""`schedule(key=k)` racing `cancel(k)` answers as its `on_conflict` says: never a raw
IntegrityError (issue 34, item 2), on SQLite, PostgreSQL and MariaDB.

The row holding the key used to be cancelled between schedule()'s refused INSERT and its
look at the row that refused it; finding none, schedule() re-raised the IntegrityError.
The first tests play that interleaving exactly, from other connections (threads), at the
statements where it happens; the last runs the race itself, bounded, in threads.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import DatabaseError, IntegrityError, connection, connections

from notifications.api import cancel, schedule
from notifications.models import Notification
from notifications.models.validation import KEY_TAKEN
from notifications.services import inserting

KEY = "race"
WAIT = 90  # seconds a helper thread may take; generous, the machine is shared
ROW = {"channels": ["webhook"], "webhook_url": "https://example.com/hooks/in"}

pytestmark = pytest.mark.django_db(transaction=True)


def in_another_connection(work: Callable[[], Any]) -> Any:
    """Run `work` in a thread of its own (so on a connection of its own), committed, and wait for it."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # handed to the test's thread
            outcome["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(WAIT)
    assert not thread.is_alive(), "the other connection did not finish"
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def verb(sql: str) -> str:
    return sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""


class TakenThenCancelled:
    """An execute wrapper that plays the race on this connection's statements.

    Before the first statement that writes, another connection schedules the key (so the
    INSERT is refused); after the refusal, before this connection's next query (the look
    at the row that refused it), another connection cancels the key.
    """

    def __init__(self) -> None:
        self.taken = False
        self.refused = False
        self.cancelled = False

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        word = verb(sql)
        if not self.taken and word in ("BEGIN", "SAVEPOINT", "INSERT"):
            self.taken = True
            in_another_connection(lambda: schedule(**ROW, key=KEY, payload={"by": "other"}))
        if self.refused and not self.cancelled and word in ("SELECT", "INSERT", "UPDATE"):
            self.cancelled = True
            assert in_another_connection(lambda: cancel(KEY)) is True
        try:
            return execute(sql, params, many, context)
        except IntegrityError:
            if word == "INSERT":
                self.refused = True
            raise


def test_error_answers_with_a_validation_error_on_key_when_the_holder_is_cancelled_after_the_refusal():
    race = TakenThenCancelled()
    with connection.execute_wrapper(race), pytest.raises(ValidationError) as refused:
        schedule(**ROW, key=KEY, payload={"by": "me"})

    assert race.taken and race.refused
    assert refused.value.message_dict == {"key": [KEY_TAKEN]}  # the key was taken when it tried
    assert {"by": "me"} not in Notification.objects.values_list("payload", flat=True)


@pytest.mark.parametrize("on_conflict", ["replace", "keep"])
def test_replace_and_keep_insert_after_all_when_the_holder_is_cancelled_after_the_refusal(on_conflict):
    race = TakenThenCancelled()
    with connection.execute_wrapper(race):
        row = schedule(**ROW, key=KEY, on_conflict=on_conflict, payload={"by": "me"})

    assert race.taken and race.refused and race.cancelled
    stored = Notification.objects.get(key=KEY)
    assert (stored.pk, stored.payload) == (row.pk, {"by": "me"})


def test_a_refusal_by_another_constraint_is_not_taken_for_the_key():
    refusal = IntegrityError("NOT NULL constraint failed: notifications_notification.channels")
    assert not inserting.is_key_violation(refusal)


# --- the race itself, bounded ------------------------------------------------------------

ROUNDS = 60  # schedule() calls per policy; each races the canceller's loop


def test_schedule_racing_cancel_never_raises_a_raw_integrity_error(vendor, capsys):
    """Three threads loop schedule(key=KEY) with "error", "replace" and "keep" beside one
    looping cancel(KEY) until they are done: each call returns the row or (with "error")
    a ValidationError on key; the key never ends up on two rows."""
    done = threading.Event()
    raised: dict[str, list[BaseException]] = {"error": [], "replace": [], "keep": []}
    answers: dict[str, Counter[str]] = {policy: Counter() for policy in raised}
    cancel_trouble: list[BaseException] = []

    def scheduler(policy: str) -> None:
        try:
            for n in range(ROUNDS):
                try:
                    schedule(**ROW, key=KEY, on_conflict=policy, payload={"n": n})
                    answers[policy]["row"] += 1
                except ValidationError as exc:
                    if exc.message_dict != {"key": [KEY_TAKEN]} or policy != "error":
                        raised[policy].append(exc)
                    answers[policy]["key taken"] += 1
                except Exception as exc:
                    raised[policy].append(exc)
        finally:
            connections.close_all()

    def canceller() -> None:
        try:
            while not done.is_set():
                try:
                    cancel(KEY)
                except DatabaseError as exc:  # a deadlock of cancel's own (issue 34, item 1): not this test's
                    if not inserting.is_retryable(exc):
                        cancel_trouble.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=scheduler, args=(policy,)) for policy in raised]
    stopper = threading.Thread(target=canceller)
    stopper.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 3)
    done.set()
    stopper.join(WAIT)
    assert not any(t.is_alive() for t in [*threads, stopper])

    assert raised == {"error": [], "replace": [], "keep": []}
    assert cancel_trouble == []
    assert Notification.objects.filter(key=KEY).count() <= 1
    with capsys.disabled():
        print(f"\n[schedule vs cancel] {vendor}: {dict((p, dict(c)) for p, c in answers.items())}")
