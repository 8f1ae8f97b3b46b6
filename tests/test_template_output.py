"""A template's output is counted as its nodes render, not after they are joined.

`"{{ x }}" * 13000` (65,000 characters, under the template limit) with a 60 KB value
(under the payload limit) would make 780 MB of text before the check at the end: 6.6 s
and 1.5 GB on one worker, although the render limit is 1 s. The tick now refuses it
within a fraction of that: dead-lettered as a template error, nothing sent.
"""

from __future__ import annotations

import time
import tracemalloc

import pytest
from django.core import mail

from notifications.api import run_tick, schedule
from notifications.content.templating import MAX_OUTPUT_CHARS, MAX_RENDER_SECONDS, TemplateRenderError, render
from notifications.models import Notification

pytestmark = pytest.mark.django_db

MANY = "{{ x }}" * 9000  # 63,000 characters
VALUE = "a" * 60_000


def test_many_variables_of_a_big_value_stop_at_the_output_limit_before_joining_them():
    """Measured in memory, not seconds (a loaded machine cannot make it flake): joining the
    whole output first would allocate 540 MB; counting as nodes render stops near the limit."""
    tracemalloc.start()
    try:
        with pytest.raises(TemplateRenderError, match=f"longer than {MAX_OUTPUT_CHARS:,} characters"):
            render(MANY, {"x": VALUE}, autoescape=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def test_the_tick_dead_letters_such_a_row_quickly_and_sends_nothing():
    row = schedule(channels=["email"], email_to="ada@example.com", subject="Hi", body=MANY, payload={"x": VALUE})

    started = time.monotonic()
    report = run_tick()
    seconds = time.monotonic() - started

    assert report.counts()["dead_lettered"] == 1
    assert seconds < 10 * MAX_RENDER_SECONDS  # a guard against the 6.6 s of old, not a timing
    row = Notification.objects.get(pk=row.pk)
    assert row.last_error == f"email: template error: the result is longer than {MAX_OUTPUT_CHARS:,} characters"
    assert mail.outbox == []


def test_blocks_count_their_output_too():
    template = "{% if x %}" + "{{ x }}" * 3 + "{% endif %}"
    with pytest.raises(TemplateRenderError, match="longer than"):
        render(template, {"x": "a" * 30_000})
    assert render("{% if x %}{{ x }}{% endif %}", {"x": "ok"}) == "ok"
