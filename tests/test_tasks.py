"""`notifications.tasks.QueueBackend`: Django's tasks as rows of the queue, run by `runtick`.

Django 6.0+ (skipped with the reason on 5.2, where `test_tasks_django52.py` checks W070).
"""

from __future__ import annotations

from datetime import timedelta

import django
import pytest
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone

from notifications.models import Notification, TaskRun

pytestmark = [
    pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks is Django 6.0+: this is Django 5.2"),
    pytest.mark.django_db(transaction=True),  # the task runs in a worker thread, with its own connection
]

TASKS = {
    "default": {
        "BACKEND": "notifications.tasks.QueueBackend",
        "QUEUES": ["default", "reports"],
        "OPTIONS": {"MAX_RETRIES": 2},
    }
}


@pytest.fixture(autouse=True)
def queue_backend(settings):
    settings.TASKS = TASKS


@pytest.fixture
def fns():
    from tests.support import task_functions

    return task_functions


def tick(*args: str) -> None:
    call_command("runtick", *args)


def status(result):
    result.refresh()
    return result.status


def test_enqueue_in_a_rolled_back_transaction_leaves_nothing(fns):
    with pytest.raises(RuntimeError), transaction.atomic():
        fns.add.enqueue(1, 2)
        assert Notification.objects.count() == 1
        raise RuntimeError("roll back")
    assert not Notification.objects.exists()
    assert not TaskRun.objects.exists()
    tick()
    assert not TaskRun.objects.exists()


def test_aenqueue_inserts_in_the_callers_transaction_and_aget_result_reads_it(fns):
    from asgiref.sync import async_to_sync

    with pytest.raises(RuntimeError), transaction.atomic():
        async_to_sync(fns.add.aenqueue)(1, 2)
        assert Notification.objects.count() == 1  # in this transaction: the caller's thread
        raise RuntimeError("roll back")
    assert not Notification.objects.exists() and not TaskRun.objects.exists()

    result = async_to_sync(fns.add.aenqueue)(2, 3)
    assert async_to_sync(fns.add.aget_result)(result.id).status == "READY"
    tick()
    done = async_to_sync(fns.add.aget_result)(result.id)
    assert (done.status, done.return_value) == ("SUCCESSFUL", 5)


def test_runtick_runs_a_task_and_its_result_is_successful(fns):
    from django.tasks.signals import task_enqueued, task_finished, task_started

    heard = []

    def listen(signal_name):
        return lambda sender, task_result, **kw: heard.append((signal_name, task_result.status))

    receivers = {name: listen(name) for name in ("enqueued", "started", "finished")}
    task_enqueued.connect(receivers["enqueued"])
    task_started.connect(receivers["started"])
    task_finished.connect(receivers["finished"])
    try:
        result = fns.add.enqueue(2, 3)
        assert result.status == "READY"
        assert result.enqueued_at is not None
        row = Notification.objects.get()
        assert row.channels == ["task"] and row.subject == "tests.support.task_functions.add"
        tick()
    finally:
        task_enqueued.disconnect(receivers["enqueued"])
        task_started.disconnect(receivers["started"])
        task_finished.disconnect(receivers["finished"])

    done = fns.add.get_result(result.id)
    assert done.status == "SUCCESSFUL"
    assert done.return_value == 5
    assert done.errors == []
    assert len(done.worker_ids) == 1 and done.attempts == 1
    assert done.enqueued_at <= done.started_at <= done.finished_at
    assert done.last_attempted_at == done.started_at
    assert done.args == [2, 3]
    assert not Notification.objects.exists()  # the row went as a delivered one-shot row does
    assert heard == [("enqueued", "READY"), ("started", "RUNNING"), ("finished", "SUCCESSFUL")]


def test_a_task_uses_the_database_with_a_connection_of_its_own(fns, django_user_model):
    django_user_model.objects.create(username="a")
    result = fns.count_users.enqueue()
    tick()
    assert fns.count_users.get_result(result.id).return_value == 1


def test_a_failing_task_retries_with_backoff_then_fails_with_each_traceback(fns, time_machine):
    from notifications import api

    time_machine.move_to(timezone.now(), tick=True)
    result = fns.fail.enqueue("boom")
    tick()
    assert status(result) == "READY"  # retried later, with the queue's backoff
    row = Notification.objects.get()
    assert row.error_count == 1 and row.next_fire_at > timezone.now()
    assert row.last_error == "task: builtins.ValueError"
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"]
    assert "ValueError: boom" in result.errors[0].traceback
    assert "task_functions.py" in result.errors[0].traceback

    tick()  # not due yet: nothing runs
    assert len(fns.fail.get_result(result.id).errors) == 1

    time_machine.shift(timedelta(seconds=61))  # the first step of the backoff
    tick()
    failed = fns.fail.get_result(result.id)
    assert failed.status == "FAILED"  # MAX_RETRIES 2 in the backend's OPTIONS
    assert failed.finished_at is not None and failed.attempts == 2
    assert [e.exception_class_path for e in failed.errors] == ["builtins.ValueError"] * 2
    with pytest.raises(ValueError, match="Task failed"):
        _ = failed.return_value
    row = Notification.objects.get()
    assert row.dead_lettered_at is not None and row.next_fire_at is None

    api.requeue(Notification.objects.all())  # the admin's requeue runs it again
    assert fns.fail.get_result(result.id).status == "READY"
    tick()
    again = fns.fail.get_result(result.id)
    assert len(again.errors) == 3 and again.status == "READY"

    api.purge(Notification.objects.all())  # purge deletes it
    from django.tasks.exceptions import TaskResultDoesNotExist

    with pytest.raises(TaskResultDoesNotExist):
        fns.fail.get_result(result.id)


def test_priority_orders_and_run_after_defers(fns, time_machine):
    time_machine.move_to(timezone.now(), tick=True)
    low = fns.add.using(priority=-10).enqueue(1, 1)
    high = fns.add.using(priority=10).enqueue(2, 2)
    later = fns.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(3, 3)

    tick("--limit", "1", "--budget", "0")
    assert [status(r) for r in (low, high, later)] == ["READY", "SUCCESSFUL", "READY"]
    tick()
    assert [status(r) for r in (low, high, later)] == ["SUCCESSFUL", "SUCCESSFUL", "READY"]

    time_machine.shift(timedelta(hours=1, seconds=1))
    tick()
    assert status(later) == "SUCCESSFUL" and later.return_value == 6


def test_an_async_task_runs(fns):
    result = fns.add_later.enqueue(20, 22)
    tick()
    assert fns.add_later.get_result(result.id).return_value == 42


def test_arguments_that_would_not_survive_json_are_refused_at_enqueue(fns):
    from notifications.tasks import TaskArgumentsError

    with pytest.raises(TaskArgumentsError, match=r"args\[1\] cannot be passed to a task: a datetime\.datetime"):
        fns.add.enqueue(1, timezone.now())
    with pytest.raises(TaskArgumentsError, match=r"kwargs\['b'\].*a builtins\.set is not JSON"):
        fns.add.enqueue(a=1, b={1})
    with pytest.raises(TaskArgumentsError, match="keys must be strings"):
        fns.add.enqueue({1: "x"}, 2)
    with pytest.raises(TaskArgumentsError, match="inf is no JSON number"):
        fns.add.enqueue(float("inf"), 2)
    with pytest.raises(TaskArgumentsError, match=r"declared to return <class 'datetime\.date'>"):
        fns.today.enqueue()
    assert not Notification.objects.exists() and not TaskRun.objects.exists()


def test_a_return_value_json_cannot_hold_fails_its_attempt_not_the_tick(fns):
    result = fns.returns_a_set.enqueue()
    ok = fns.add.enqueue(1, 2)
    tick()
    assert [e.exception_class_path for e in fns.returns_a_set.get_result(result.id).errors] == ["builtins.TypeError"]
    assert fns.add.get_result(ok.id).return_value == 3


def test_a_task_whose_tick_died_runs_again_after_its_lease(fns):
    result = fns.add.enqueue(4, 4)
    row = Notification.objects.get()
    # A tick claimed it, started the task and died: its claim lives until the lease ends.
    now = timezone.now()
    TaskRun.objects.update(status="RUNNING", started_at=now, last_attempted_at=now, worker_ids=["dead:1"])
    Notification.objects.update(claim_token=row.firing_id, claimed_until=now + timedelta(minutes=5))
    assert status(result) == "RUNNING"
    tick()
    assert status(result) == "RUNNING"  # claimed: no other tick takes it

    Notification.objects.update(claimed_until=now - timedelta(seconds=1))  # the lease ran out
    assert status(result) == "READY"  # never stuck in RUNNING
    tick()
    assert status(result) == "SUCCESSFUL"
    assert result.worker_ids[0] == "dead:1" and len(result.worker_ids) == 2


def test_queue_names_and_validation_as_djangos_base(fns):
    from django.tasks.exceptions import InvalidTask

    with pytest.raises(InvalidTask, match="Queue 'nope' is not valid"):
        fns.add.using(queue_name="nope")
    result = fns.add.using(queue_name="reports").enqueue(1, 1)
    assert TaskRun.objects.get(pk=result.id).queue_name == "reports"


def test_the_backend_supports_all_four():
    from django.tasks import task_backends

    backend = task_backends["default"]
    assert (backend.supports_defer, backend.supports_priority, backend.supports_get_result) == (True, True, True)
    assert backend.supports_async_task is True


def test_unknown_result_ids(fns):
    from django.tasks.exceptions import TaskResultDoesNotExist

    for unknown in ("nope", "00000000-0000-0000-0000-000000000000"):
        with pytest.raises(TaskResultDoesNotExist):
            fns.add.get_result(unknown)


def test_results_are_pruned_after_the_retention(fns, settings, time_machine):
    settings.TASKS = {"default": {**TASKS["default"], "OPTIONS": {"RESULT_RETENTION_DAYS": 2}}}
    time_machine.move_to(timezone.now(), tick=True)
    result = fns.add.enqueue(1, 1)
    tick()
    time_machine.shift(timedelta(days=1))
    tick()
    assert TaskRun.objects.filter(pk=result.id).exists()
    time_machine.shift(timedelta(days=1, seconds=5))
    tick()
    assert not TaskRun.objects.filter(pk=result.id).exists()


def test_runtick_queue_runs_the_queues_it_names(fns):
    from notifications import api

    report = fns.add.using(queue_name="reports").enqueue(1, 2)
    plain = fns.add.enqueue(3, 4)
    reminder = api.schedule(channels=["email"], email_to="a@example.com", subject="s", body="b")

    tick("--queue", "reports")
    assert [status(r) for r in (report, plain)] == ["SUCCESSFUL", "READY"]
    assert Notification.objects.filter(pk=reminder.pk).exists()  # notifications are in `default`

    tick("--queue", "default")
    assert status(plain) == "SUCCESSFUL"
    assert not Notification.objects.exists()


def test_the_admin_lists_tasks_with_their_path_under_the_queue_states(fns, admin_client):
    fns.fail.enqueue("boom")
    Notification.objects.update(error_count=2, next_fire_at=None, dead_lettered_at=timezone.now())
    page = admin_client.get("/admin/notifications/notification/?state=dead")
    assert page.status_code == 200
    assert "tests.support.task_functions.fail" in page.content.decode()
    assert (
        "tests.support.task_functions.fail"
        not in admin_client.get("/admin/notifications/notification/?state=due").content.decode()
    )


def test_manage_py_check_reports_bad_options_on_django_6(settings):
    from django.core import checks

    settings.TASKS = {"default": {"BACKEND": "notifications.tasks.QueueBackend", "OPTIONS": {"MAX_RETRIES": 0}}}
    found = [m for m in checks.run_checks() if m.id == "notifications.E071"]
    assert [m.msg for m in found] == ["TASKS['default']: MAX_RETRIES must be a positive whole number, not 0."]
    assert not [m for m in checks.run_checks() if m.id == "notifications.W070"]


@pytest.mark.parametrize("timeout", [0, -1, "60", True, float("nan"), 86_401])
def test_manage_py_check_reports_a_task_timeout_that_is_no_number_of_seconds(settings, timeout):
    from django.core import checks

    settings.TASKS = {"default": {"BACKEND": "notifications.tasks.QueueBackend", "OPTIONS": {"TIMEOUT": timeout}}}
    found = [m.msg for m in checks.run_checks() if m.id == "notifications.E071"]
    assert found == [f"TASKS['default']: TIMEOUT must be a number of seconds above 0, at most 86400, not {timeout!r}."]


def test_a_task_has_the_deadline_its_backend_gives_not_the_channel_timeout(settings):
    from notifications.channels import registry
    from notifications.conf import TickSettings

    settings.NOTIFICATIONS_CHANNEL_TIMEOUT = 3
    settings.TASKS = {
        "default": {"BACKEND": "notifications.tasks.QueueBackend"},
        "reports": {"BACKEND": "notifications.tasks.QueueBackend", "OPTIONS": {"TIMEOUT": 1800}},
    }
    channels = registry.open_for_tick(TickSettings.read())
    assert (channels["task"].timeout, channels["webhook"].timeout) == (1800, 3)  # the longest of the aliases
    for channel in channels.values():
        channel.close()
    settings.TASKS = {"default": {"BACKEND": "notifications.tasks.QueueBackend"}}
    channels = registry.open_for_tick(TickSettings.read())
    assert channels["task"].timeout == 600  # ten minutes by default
    for channel in channels.values():
        channel.close()
