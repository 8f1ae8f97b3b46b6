"""On Django 5.2 `notifications.tasks` imports, and `manage.py check` says the backend needs Django 6."""

from __future__ import annotations

import django
import pytest
from django.core import checks

from notifications.tasks.checks import backend_options, needs_django_6

BACKEND = "notifications.tasks.QueueBackend"


def test_the_backend_imports_on_every_supported_django():
    from notifications.tasks import QueueBackend

    assert QueueBackend.supports_defer and QueueBackend.supports_priority
    assert QueueBackend.supports_get_result and QueueBackend.supports_async_task


@pytest.mark.skipif(django.VERSION >= (6, 0), reason="Django 6.0+ has django.tasks: nothing to warn of")
def test_check_says_the_backend_needs_django_6(settings):
    settings.TASKS = {"default": {"BACKEND": BACKEND}, "other": {"BACKEND": "somewhere.Else"}}
    messages = checks.run_checks()
    mine = [m for m in messages if m.id == "notifications.W070"]
    assert [m.msg for m in mine] == [
        f"TASKS['default'] names {BACKEND}, which needs Django 6.0 or later "
        f"(this is Django {django.get_version()}): its tasks cannot be enqueued or run."
    ]
    assert mine[0].level == checks.WARNING  # a warning: nothing else of the app stops
    assert mine[0].hint == "Upgrade Django to 6.0, or remove the entry from TASKS."


def test_no_warning_without_the_backend_in_tasks(settings):
    settings.TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
    assert needs_django_6() == []


@pytest.mark.skipif(django.VERSION < (6, 0), reason="on Django 5.2 the backend's own check() never runs")
def test_no_warning_on_django_6(settings):
    settings.TASKS = {"default": {"BACKEND": BACKEND}}
    assert needs_django_6() == []


def test_options_are_checked():
    assert backend_options("default", {"MAX_RETRIES": 3, "RESULT_RETENTION_DAYS": 7}) == []
    errors = backend_options("default", {"MAX_RETRIES": 0, "RESULT_RETENTION_DAYS": "7", "RETRIES": 1})
    assert [e.id for e in errors] == ["notifications.E071"] * 3
    assert [e.msg for e in errors] == [
        "TASKS['default']: unknown option 'RETRIES'.",
        "TASKS['default']: MAX_RETRIES must be a positive whole number, not 0.",
        "TASKS['default']: RESULT_RETENTION_DAYS must be a positive whole number, not '7'.",
    ]
