"""`notifications.admin.display`: the one format of times, targets and clipped text in the admin."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from notifications.admin.display import clip, duration, exact, moment, relative, webhook_target

NOW = datetime(2030, 1, 7, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "two_units", "one_unit"),
    [
        (0, "0 s", "0 s"),
        (12, "12 s", "12 s"),
        (60, "1 min", "1 min"),
        (250, "4 min 10 s", "4 min"),
        (3600, "1 h", "1 h"),
        (3605, "1 h", "1 h"),  # no "1 h 0 min 5 s": the largest two units, the second left out when 0
        (7500, "2 h 5 min", "2 h"),
        (90000, "1 d 1 h", "1 d"),
        (-250, "4 min 10 s", "4 min"),
    ],
)
def test_duration(seconds, two_units, one_unit):
    assert duration(timedelta(seconds=seconds)) == two_units
    assert duration(timedelta(seconds=seconds), units=1) == one_unit


@pytest.mark.parametrize(
    ("offset", "text"),
    [
        (timedelta(seconds=-12), "12 s ago"),
        (timedelta(minutes=4, seconds=50), "in 4 min"),
        (timedelta(hours=-3, minutes=-59), "3 h ago"),
        (timedelta(milliseconds=400), "now"),
        (timedelta(days=2, hours=5), "in 2 d"),
    ],
)
def test_relative(offset, text):
    assert relative(NOW + offset, NOW) == text


def test_exact_has_seconds_and_the_offset_where_it_says_something():
    assert exact(NOW) == "2030-01-07 12:00:00 UTC"
    assert exact(NOW, ZoneInfo("Europe/Berlin")) == "2030-01-07 13:00:00 CET (+0100)"
    assert exact(NOW, ZoneInfo("America/Argentina/Buenos_Aires")) == "2030-01-07 09:00:00 -03"  # named by its offset
    with timezone.override("Asia/Tokyo"):  # the current time zone when none is given
        assert exact(NOW) == "2030-01-07 21:00:00 JST (+0900)"


def test_moment_is_relative_with_the_exact_time_on_hover():
    assert moment(NOW - timedelta(seconds=12), NOW) == (
        '<time class="nq-moment" datetime="2030-01-07T11:59:48+00:00" title="2030-01-07 11:59:48 UTC">12 s ago</time>'
    )
    assert moment(None) is None


def test_clip_escapes():
    assert clip("<b>x</b>") == '<span class="nq-clip" title="&lt;b&gt;x&lt;/b&gt;">&lt;b&gt;x&lt;/b&gt;</span>'


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.example.com/hooks/invoices?token=abc", "hooks.example.com/hooks/invoices"),
        ("http://127.0.0.1:8081/hooks/ok", "127.0.0.1:8081/hooks/ok"),
        ("https://user:secret@Example.COM:443/", "example.com/"),
        ("http://[::1]:9000/a#frag", "[::1]:9000/a"),
        (
            "https://hooks.slack.com/services/T0AB12CD/B0CD34EF/a1b2c3d4e5f6g7h8i9j0k1l2",
            "hooks.slack.com/services/T0AB12CD/B0CD34EF/…",
        ),
        (
            "https://discord.com/api/webhooks/123456789012345678/" + "x" * 68,
            "discord.com/api/webhooks/123456789012345678/…",
        ),
        ("https://example.com", "example.com"),
        ("not a url", "?"),
        ("http://[bad", "?"),
    ],
)
def test_webhook_target_is_host_and_path_never_query_or_credentials(url, shown):
    assert webhook_target(url) == shown
