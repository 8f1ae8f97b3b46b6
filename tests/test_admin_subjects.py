"""The list's subject column says what goes out: a templated subject rendered with its row's
payload (`notifications.admin.subjects`), safely. Whatever a row holds, the page shows;
what a row holds is escaped; a template that cannot be rendered is shown as its text,
marked, with why on hover. tests/test_admin_phone.py reads the same column in Chromium."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

import pytest
from django.core.mail import EmailMessage
from django.utils import timezone

from notifications.admin import subjects
from notifications.api import run_tick, schedule
from notifications.models import Notification

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/notifications/notification/"
LATER = timedelta(hours=1)


def email(subject: str, payload: dict | None = None, **fields) -> Notification:
    fields.setdefault("fire_at", timezone.now() + LATER)
    return schedule(
        channels=["email"], email_to="ada@example.com", subject=subject, body="-", payload=payload or {}, **fields
    )


def subject_cell(html: str, row: Notification) -> str:
    """The HTML of `row`'s subject cell in the list."""
    found = re.search(rf'value="{row.pk}".*?<td class="field-subject_or_event">(.*?)</td>', html, re.S)
    assert found, f"row {row.pk} is not listed"
    return found.group(1)


def shown(html: str, row: Notification) -> str:
    """The text of `row`'s subject line, as the list shows it (before the schedule line)."""
    line = subject_cell(html, row).split('<span class="nq-clip nq-quiet nq-', 1)[0]
    return unescape(re.sub(r"<[^>]+>", "", line))


def hover(html: str, row: Notification) -> str:
    return unescape(re.search(r'title="([^"]*)"', subject_cell(html, row)).group(1))


def test_a_templated_subject_shows_rendered_with_its_rows_payload(admin_client):
    grace = email(
        "Hello {{ name }}, invoice {{ invoice.number }} is ready", {"name": "Grace", "invoice": {"number": 42}}
    )
    plain = email("No template here")

    html = admin_client.get(CHANGELIST).content.decode()

    assert shown(html, grace) == "Hello Grace, invoice 42 is ready"
    assert hover(html, grace) == "Hello Grace, invoice 42 is ready"
    assert shown(html, plain) == "No template here"
    assert "{{ name }}" not in html


def test_what_a_payload_holds_is_escaped(admin_client):
    row = email("Hi {{ name }}", {"name": '<script>window.__xss = 1</script><img src=x onerror="x()">'})

    html = admin_client.get(CHANGELIST).content.decode()

    assert "<script>window.__xss" not in html and "<img src=x" not in html
    assert shown(html, row) == 'Hi <script>window.__xss = 1</script><img src=x onerror="x()">'  # as text


def test_a_template_that_fails_shows_its_text_marked_and_the_page_stays_up(admin_client):
    # Valid when saved; past the engine's loop limit only with this payload (30 ** 3 iterations).
    loops = "{% for a in l %}{% for b in l %}{% for c in l %}x{% endfor %}{% endfor %}{% endfor %}"
    failing = email(loops, {"l": list(range(30))})
    fine = email("Hello {{ name }}", {"name": "Grace"})

    response = admin_client.get(CHANGELIST)

    assert response.status_code == 200
    html = response.content.decode()
    assert shown(html, failing) == f"(not rendered) {loops}"
    assert "nq-unrendered" in subject_cell(html, failing)
    assert hover(html, failing).startswith("Not rendered (loops ran past the limit of 10,000 iterations): {% for a")
    assert shown(html, fine) == "Hello Grace"


def test_rows_written_around_validation_never_break_the_page(admin_client):
    odd_language = email("Hello {{ name }}", {"name": "Grace"})
    broken = email("Hello {{ name }}", {"name": "Grace"})
    listed = email("Hello {{ name }}", {"name": "Ann"})
    Notification.objects.filter(pk=odd_language.pk).update(language="xx-bogus")
    Notification.objects.filter(pk=broken.pk).update(subject="{% url 'admin:index' %} {{ name", payload=[1, 2])

    response = admin_client.get(CHANGELIST)

    assert response.status_code == 200
    html = response.content.decode()
    assert shown(html, listed) == "Hello Ann"
    assert shown(html, broken) == "(not rendered) {% url 'admin:index' %} {{ name"
    assert "not available in notification templates" in hover(html, broken)  # the engine's rule, no payload
    assert shown(html, odd_language) == "Hello Grace"  # an unknown language: Django falls back to the site's


def test_a_digests_subject_shows_its_count_once_the_digest_has_formed(admin_client):
    now = timezone.now()
    rows = [
        email(
            "{{ count }} new comments",
            {"n": n},
            recipient="user:42",
            digest_key="comments",
            digest_window=600,
            fire_at=now,
        )
        for n in range(3)
    ]
    waiting = email("{{ count }} new comments", {}, recipient="user:7", digest_key="comments", digest_window=600)
    naming_items = email(
        "{{ items|length }} comments", {}, recipient="user:8", digest_key="comments", digest_window=600, fire_at=now
    )
    run_tick(now=now)  # files the due rows into their digests; the window is still open

    html = admin_client.get(CHANGELIST).content.decode()

    assert [shown(html, row) for row in rows] == ["3 new comments"] * 3
    assert shown(html, waiting) == "(not rendered) {{ count }} new comments"
    assert "its digest has not formed yet" in hover(html, waiting)
    assert shown(html, naming_items) == "(not rendered) {{ items|length }} comments"


def test_a_queued_messages_subject_is_shown_as_it_is_sent(admin_client, settings, django_capture_on_commit_callbacks):
    settings.EMAIL_BACKEND = "notifications.mail.QueuedEmailBackend"
    with django_capture_on_commit_callbacks(execute=True):  # the backend queues at commit
        EmailMessage("Use {{ braces }} freely", "Body", "billing@example.com", ["ann@example.com"]).send()
    row = Notification.objects.get(subject="Use {{ braces }} freely")

    html = admin_client.get(CHANGELIST).content.decode()

    assert shown(html, row) == "Use {{ braces }} freely"  # sent as it is: not a template, not marked


def test_a_row_of_the_sites_template_files_is_named_not_rendered(admin_client):
    row = email("placeholder")
    Notification.objects.filter(pk=row.pk).update(subject="", template="reminders/invoice")

    html = admin_client.get(CHANGELIST).content.decode()

    assert shown(html, row) == "(template) reminders/invoice"


def test_past_the_pages_time_for_templates_the_rest_show_marked(admin_client, monkeypatch):
    rows = [email("Hello {{ name }}", {"name": f"person {n}"}) for n in range(3)]
    monkeypatch.setattr(subjects, "PAGE_SECONDS", 0)  # the page's time spent before its first render

    html = admin_client.get(CHANGELIST).content.decode()

    assert [shown(html, row) for row in rows] == ["(not rendered) Hello {{ name }}"] * 3
    assert "the page's time for rendering templates ran out" in hover(html, rows[0])
