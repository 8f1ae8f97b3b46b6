"""`manage.py check` reports every misconfiguration with a stable id, a message and a hint."""

from __future__ import annotations

import os
import stat

import pytest
from django.conf import settings
from django.core import checks, mail
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from notifications.channels.email.channel import site_mailers

SMTP = "django.core.mail.backends.smtp.EmailBackend"


def notification_messages() -> list[tuple[str, str, str | None]]:
    """(id, message, hint) of every message the app's registered checks report right now."""
    ours = [
        c
        for c in checks.registry.registry.get_checks()
        if c.__module__.startswith(("notifications.checks", "notifications.channels.checks"))
    ]
    assert len(ours) >= 4  # registered by the app's ready()
    return [(m.id, m.msg, m.hint) for check in ours for m in check(app_configs=None)]


def ids() -> list[str]:
    return [message_id for message_id, _, _ in notification_messages()]


def test_the_test_settings_are_clean():
    assert notification_messages() == []


@pytest.mark.parametrize(
    ("name", "value", "message_id", "message", "hint"),
    [
        (
            "TICK_LIMIT",
            0,
            "notifications.E001",
            "NOTIFICATIONS_TICK_LIMIT must be a positive integer, not 0.",
            "Remove NOTIFICATIONS_TICK_LIMIT to use the default (100).",
        ),
        (
            "TICK_LIMIT",
            "100",
            "notifications.E001",
            "NOTIFICATIONS_TICK_LIMIT must be a positive integer, not '100'.",
            "Remove NOTIFICATIONS_TICK_LIMIT to use the default (100).",
        ),
        (
            "MAX_RETRIES",
            -1,
            "notifications.E002",
            "NOTIFICATIONS_MAX_RETRIES must be a positive integer, not -1.",
            "Remove NOTIFICATIONS_MAX_RETRIES to use the default (3).",
        ),
        (
            "MAX_RETRIES",
            2.5,
            "notifications.E002",
            "NOTIFICATIONS_MAX_RETRIES must be a positive integer, not 2.5.",
            "Remove NOTIFICATIONS_MAX_RETRIES to use the default (3).",
        ),
        (
            "CHANNEL_TIMEOUT",
            0,
            "notifications.E003",
            "NOTIFICATIONS_CHANNEL_TIMEOUT must be a positive number, not 0.",
            "Remove NOTIFICATIONS_CHANNEL_TIMEOUT to use the default (10).",
        ),
        (
            "CHANNEL_TIMEOUT",
            "10",
            "notifications.E003",
            "NOTIFICATIONS_CHANNEL_TIMEOUT must be a positive number, not '10'.",
            "Remove NOTIFICATIONS_CHANNEL_TIMEOUT to use the default (10).",
        ),
        (
            "TICK_BUDGET",
            -5,
            "notifications.E004",
            "NOTIFICATIONS_TICK_BUDGET must be a positive number, not -5.",
            "Remove NOTIFICATIONS_TICK_BUDGET to use the default (50).",
        ),
        (
            "CONCURRENCY",
            True,
            "notifications.E005",
            "NOTIFICATIONS_CONCURRENCY must be a positive integer, not True.",
            "Remove NOTIFICATIONS_CONCURRENCY to use the default (256).",
        ),
        (
            "TARGET_CONCURRENCY",
            0,
            "notifications.E018",
            "NOTIFICATIONS_TARGET_CONCURRENCY must be a positive integer, not 0.",
            "Remove NOTIFICATIONS_TARGET_CONCURRENCY to use the default (16).",
        ),
        (
            "LEASE",
            0,
            "notifications.E007",
            "NOTIFICATIONS_LEASE must be a positive number, not 0.",
            "Remove NOTIFICATIONS_LEASE to use the default.",
        ),
        (
            "RESPONSE_BODY_LIMIT",
            0,
            "notifications.E013",
            "NOTIFICATIONS_RESPONSE_BODY_LIMIT must be a positive integer, not 0.",
            "Remove NOTIFICATIONS_RESPONSE_BODY_LIMIT to use the default (65536).",
        ),
        (
            "ATTEMPT_RETENTION_DAYS",
            None,
            "notifications.E014",
            "NOTIFICATIONS_ATTEMPT_RETENTION_DAYS must be a positive number, not None.",
            "Remove NOTIFICATIONS_ATTEMPT_RETENTION_DAYS to use the default (30).",
        ),
        (
            "MAX_PAYLOAD_BYTES",
            0,
            "notifications.E016",
            "NOTIFICATIONS_MAX_PAYLOAD_BYTES must be a positive integer, not 0.",
            "Remove NOTIFICATIONS_MAX_PAYLOAD_BYTES to use the default (65536).",
        ),
        (
            "MAX_PAYLOAD_BYTES",
            "64k",
            "notifications.E016",
            "NOTIFICATIONS_MAX_PAYLOAD_BYTES must be a positive integer, not '64k'.",
            "Remove NOTIFICATIONS_MAX_PAYLOAD_BYTES to use the default (65536).",
        ),
    ],
)
def test_numbers_must_be_positive_and_of_the_right_type(name, value, message_id, message, hint):
    with override_settings(**{f"NOTIFICATIONS_{name}": value}):
        assert notification_messages() == [(message_id, message, hint)]


@pytest.mark.parametrize("value", [[], "60,300", [60, 0], [60, "300"], [60, False], None])
def test_backoff_must_list_positive_seconds(value):
    with override_settings(NOTIFICATIONS_BACKOFF=value):
        assert notification_messages() == [
            (
                "notifications.E006",
                f"NOTIFICATIONS_BACKOFF must be a non-empty list of positive seconds, not {value!r}.",
                "For example [60, 300, 1800].",
            )
        ]


def test_backoff_shorter_than_the_retries_need_warns():
    with override_settings(NOTIFICATIONS_MAX_RETRIES=5, NOTIFICATIONS_BACKOFF=[60, 300]):
        assert notification_messages() == [
            (
                "notifications.W001",
                "NOTIFICATIONS_BACKOFF has 2 steps but NOTIFICATIONS_MAX_RETRIES=5 needs 4; the last step repeats.",
                "List one delay per retry.",
            )
        ]
    # MAX_RETRIES attempts need MAX_RETRIES - 1 delays: exactly enough is clean.
    with override_settings(NOTIFICATIONS_MAX_RETRIES=3, NOTIFICATIONS_BACKOFF=[60, 300]):
        assert notification_messages() == []


def test_a_lease_shorter_than_budget_plus_deadline_is_an_error():
    with override_settings(NOTIFICATIONS_LEASE=50, NOTIFICATIONS_TICK_BUDGET=50, NOTIFICATIONS_CHANNEL_TIMEOUT=10):
        assert notification_messages() == [
            (
                "notifications.E008",
                "NOTIFICATIONS_LEASE (50s) must be longer than NOTIFICATIONS_TICK_BUDGET plus "
                "NOTIFICATIONS_CHANNEL_TIMEOUT (60s).",
                "A claim that expires while its tick still delivers lets a second tick send the same firing. "
                "Remove NOTIFICATIONS_LEASE to derive it from the budget and the timeout.",
            )
        ]
    with override_settings(NOTIFICATIONS_LEASE=61, NOTIFICATIONS_TICK_BUDGET=50, NOTIFICATIONS_CHANNEL_TIMEOUT=10):
        assert notification_messages() == []


def test_a_lease_is_not_compared_with_a_broken_budget():
    with override_settings(NOTIFICATIONS_LEASE=5, NOTIFICATIONS_TICK_BUDGET="50"):
        assert ids() == ["notifications.E004"]


def test_a_secret_of_the_wrong_type_is_an_error():
    with override_settings(NOTIFICATIONS_WEBHOOK_SECRET=b"whsec_abc"):
        assert notification_messages() == [
            (
                "notifications.E009",
                "NOTIFICATIONS_WEBHOOK_SECRET must be a string or a list of strings, not bytes.",
                'For example "whsec_..." or, while rotating, ["whsec_new...", "whsec_old..."].',
            )
        ]


GENERATE_HINT = (
    "Generate one with: python -c \"import base64, os; print('whsec_' + base64.b64encode(os.urandom(32)).decode())\""
)


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        (
            "s3cr3t-in-plain-text",
            "NOTIFICATIONS_WEBHOOK_SECRET (key 1) is malformed: A webhook secret starts with 'whsec_'.",
        ),
        (
            "whsec_not base64!",
            "NOTIFICATIONS_WEBHOOK_SECRET (key 1) is malformed: A webhook secret is 'whsec_' followed by base64.",
        ),
        (
            "whsec_c2hvcnQ=",
            "NOTIFICATIONS_WEBHOOK_SECRET (key 1) is malformed: A webhook secret must hold at least 24 bytes.",
        ),
        (
            ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "old-plain-secret"],
            "NOTIFICATIONS_WEBHOOK_SECRET (key 2) is malformed: A webhook secret starts with 'whsec_'.",
        ),
    ],
)
def test_a_malformed_secret_is_an_error_that_never_echoes_it(secret, message):
    with override_settings(NOTIFICATIONS_WEBHOOK_SECRET=secret):
        found = notification_messages()
    assert found == [("notifications.E010", message, GENERATE_HINT)]
    for value in [secret] if isinstance(secret, str) else secret:
        assert value not in found[0][1]


def test_allowed_networks_must_be_a_list_of_cidrs():
    with override_settings(NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8"):
        assert notification_messages() == [
            (
                "notifications.E011",
                "NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS must be a list of CIDRs, not '127.0.0.0/8'.",
                'For example ["127.0.0.0/8", "::1/128"] on a development machine.',
            )
        ]
    with override_settings(NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS=["10.0.0.0/8", "localhost"]):
        assert notification_messages() == [
            (
                "notifications.E012",
                "NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS holds 'localhost', which is not a CIDR.",
                'For example "10.0.0.0/8".',
            )
        ]


def test_a_misspelt_setting_is_pointed_out():
    with override_settings(NOTIFICATIONS_TICK_LIMT=5, NOTIFICATIONS_FROBNICATE=True):
        assert notification_messages() == [
            (
                "notifications.W005",
                "NOTIFICATIONS_FROBNICATE is not a setting of the notifications app; it has no effect.",
                "See docs/settings.md.",
            ),
            (
                "notifications.W005",
                "NOTIFICATIONS_TICK_LIMT is not a setting of the notifications app; it has no effect.",
                "Did you mean NOTIFICATIONS_TICK_LIMIT?",
            ),
        ]


def test_smtp_without_email_timeout_warns():
    with override_settings(EMAIL_BACKEND=SMTP, EMAIL_TIMEOUT=None, NOTIFICATIONS_CHANNEL_TIMEOUT=10):
        assert notification_messages() == [
            (
                "notifications.W002",
                "EMAIL_TIMEOUT is not set while the SMTP email backend is in use: a stuck mail server holds "
                "a tick's worker thread with no limit, after the tick has given up on it.",
                "Set EMAIL_TIMEOUT to at most NOTIFICATIONS_CHANNEL_TIMEOUT (10s), e.g. EMAIL_TIMEOUT = 10.",
            )
        ]


def test_email_timeout_longer_than_the_channel_deadline_warns():
    with override_settings(EMAIL_BACKEND=SMTP, EMAIL_TIMEOUT=30, NOTIFICATIONS_CHANNEL_TIMEOUT=10):
        assert notification_messages() == [
            (
                "notifications.W006",
                "EMAIL_TIMEOUT (30s) is longer than NOTIFICATIONS_CHANNEL_TIMEOUT (10s): a slow mail server may "
                "still accept a message after the tick recorded a timeout, and the retry sends it twice.",
                "Set EMAIL_TIMEOUT no higher than NOTIFICATIONS_CHANNEL_TIMEOUT.",
            )
        ]
    with override_settings(EMAIL_BACKEND=SMTP, EMAIL_TIMEOUT=10, NOTIFICATIONS_CHANNEL_TIMEOUT=10):
        assert notification_messages() == []


needs_mailers = pytest.mark.skipif(not hasattr(mail, "mailers"), reason="MAILERS arrived in Django 6.1")


@needs_mailers
def test_the_default_mailer_on_smtp_without_a_timeout_warns():
    with override_settings(MAILERS={"default": {"BACKEND": SMTP}}, NOTIFICATIONS_CHANNEL_TIMEOUT=10):
        assert notification_messages() == [
            (
                "notifications.W002",
                'MAILERS["default"]["OPTIONS"]["timeout"] is not set while the SMTP email backend is in use: a '
                "stuck mail server holds a tick's worker thread with no limit, after the tick has given up on it.",
                'Set MAILERS["default"]["OPTIONS"]["timeout"] to at most NOTIFICATIONS_CHANNEL_TIMEOUT (10s), '
                'e.g. "timeout": 10.',
            )
        ]
    slow = {"default": {"BACKEND": SMTP, "OPTIONS": {"timeout": 30}}}
    with override_settings(MAILERS=slow, NOTIFICATIONS_CHANNEL_TIMEOUT=10):
        assert ids() == ["notifications.W006"]
    fine = {"default": {"BACKEND": SMTP, "OPTIONS": {"timeout": 10}}}
    with override_settings(MAILERS=fine, NOTIFICATIONS_CHANNEL_TIMEOUT=10):
        assert notification_messages() == []


@needs_mailers
def test_the_default_mailer_on_another_backend_needs_no_timeout():
    with override_settings(MAILERS={"default": {"BACKEND": "django.core.mail.backends.console.EmailBackend"}}):
        assert notification_messages() == []


def test_mailers_count_only_where_django_reads_them(monkeypatch):
    """One answer for the checks and the test double: MAILERS on Django 6.1+, EMAIL_* before."""
    mailers = {"default": {"BACKEND": SMTP}}
    with override_settings(MAILERS=mailers):
        monkeypatch.delattr(mail, "mailers", raising=False)
        assert site_mailers() is None
        monkeypatch.setattr(mail, "mailers", object(), raising=False)
        assert site_mailers() == mailers


def test_other_email_backends_need_no_email_timeout():
    with override_settings(EMAIL_BACKEND="django.core.mail.backends.console.EmailBackend", EMAIL_TIMEOUT=None):
        assert notification_messages() == []


@pytest.fixture
def path_with(tmp_path, monkeypatch):
    """Set PATH to a folder holding only the named executables."""

    def make(*names: str) -> None:
        for name in names:
            exe = tmp_path / name
            exe.write_text("#!/bin/sh\nexit 0\n")
            exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", str(tmp_path))

    return make


def test_django_crontab_without_a_crontab_binary_warns(path_with):
    path_with()  # nothing on PATH
    with override_settings(INSTALLED_APPS=[*settings.INSTALLED_APPS, "django_crontab"]):
        assert notification_messages() == [
            (
                "notifications.W003",
                "django_crontab is in INSTALLED_APPS but there is no `crontab` binary on PATH, so "
                "`manage.py crontab add` cannot install the tick.",
                "Install cron (Debian/Ubuntu: apt install cron), or run `manage.py runtick --loop 60` under your "
                "process supervisor and remove django_crontab from INSTALLED_APPS.",
            )
        ]


def test_django_crontab_with_a_crontab_binary_is_clean(path_with):
    path_with("crontab")
    with override_settings(INSTALLED_APPS=[*settings.INSTALLED_APPS, "django_crontab"]):
        assert notification_messages() == []


def test_no_django_crontab_needs_no_crontab_binary(path_with):
    path_with()
    assert os.environ["PATH"]
    assert notification_messages() == []


@pytest.fixture
def without_wal(monkeypatch, vendor):
    """The default database's OPTIONS without the WAL init command (read at connect time only);
    True when the database is not SQLite (the check has nothing to say there)."""
    options = {k: v for k, v in settings.DATABASES["default"].get("OPTIONS", {}).items() if k != "init_command"}
    monkeypatch.setitem(settings.DATABASES["default"], "OPTIONS", options)
    return vendor != "sqlite"


W004_HINT = (
    'Add to DATABASES["default"]["OPTIONS"]: {"init_command": "PRAGMA journal_mode=WAL;", '
    '"transaction_mode": "IMMEDIATE", "timeout": 30}; or lower NOTIFICATIONS_TICK_BUDGET; or use PostgreSQL.'
)


def test_sqlite_without_wal_warns_when_ticks_overlap(without_wal):
    # A tick may hold rows for budget + one channel deadline + 1 s: 50 + 10 + 1 > 60 s of cron.
    with override_settings(NOTIFICATIONS_TICK_BUDGET=50, NOTIFICATIONS_CHANNEL_TIMEOUT=10):
        found = notification_messages()
    if without_wal:  # not SQLite
        assert found == []
        return
    assert found == [
        (
            "notifications.W004",
            "The queue's SQLite database ('default') is not in WAL mode, and a tick can run for up to 61s while "
            "a new one starts every 60s: overlapping ticks (and the admin) will wait on each other and fail with "
            "'database is locked'.",
            W004_HINT,
        )
    ]


def test_sqlite_without_wal_is_fine_when_ticks_cannot_overlap(without_wal):
    with override_settings(NOTIFICATIONS_TICK_BUDGET=30, NOTIFICATIONS_CHANNEL_TIMEOUT=10):
        assert notification_messages() == []
    # The interval comes from the runtick entry of CRONJOBS when there is one.
    every_five_minutes = [("*/5 * * * *", "django.core.management.call_command", ["runtick"])]
    with override_settings(NOTIFICATIONS_TICK_BUDGET=50, NOTIFICATIONS_CHANNEL_TIMEOUT=10, CRONJOBS=every_five_minutes):
        assert notification_messages() == []


def test_sqlite_in_wal_mode_is_clean_however_long_the_tick(on_postgres):
    with override_settings(NOTIFICATIONS_TICK_BUDGET=300):
        assert notification_messages() == []


@pytest.mark.django_db  # Django 6's model checks ask the database about JSON support
def test_manage_py_check_fails_on_an_error_and_names_it():
    with override_settings(NOTIFICATIONS_MAX_RETRIES=0), pytest.raises(SystemCheckError) as caught:
        call_command("check")
    assert "(notifications.E002) NOTIFICATIONS_MAX_RETRIES must be a positive integer, not 0." in str(caught.value)
    assert "HINT: Remove NOTIFICATIONS_MAX_RETRIES to use the default (3)." in str(caught.value)


# --- the fast lane's settings (docs/databases.md, PostgreSQL behind PgBouncer) -----------------


@pytest.mark.parametrize("value", [0, -1, "2", True, 3_601, float("inf")])
def test_a_loop_poll_interval_that_is_no_number_of_seconds_up_to_an_hour_is_e036(value):
    with override_settings(NOTIFICATIONS_LOOP_POLL_INTERVAL=value):
        assert ids() == ["notifications.E036"]
    with override_settings(NOTIFICATIONS_LOOP_POLL_INTERVAL=0.5):
        assert ids() == []


SECRET_URL = "postgres://site:s3cret-pw@[db.internal"  # malformed: libpq cannot read it


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("nowhere", "names no alias of DATABASES and is not a postgres:// URL"),
        (42, "is not a string"),
        (SECRET_URL, "is a URL libpq cannot read"),
    ],
)
def test_a_listen_database_that_names_no_postgresql_alias_nor_a_url_is_w011_without_repeating_it(value, says):
    with override_settings(NOTIFICATIONS_LISTEN_DATABASE=value):
        messages = [m for m in notification_messages() if m[0] == "notifications.W011"]
    assert [m[0] for m in messages] == ["notifications.W011"] and says in messages[0][1]
    assert "s3cret" not in str(messages)


def test_a_listen_database_alias_of_another_engine_is_w011_and_a_good_url_or_alias_is_not(vendor):
    with override_settings(NOTIFICATIONS_LISTEN_DATABASE="default"):
        found = [m for m in notification_messages() if m[0] == "notifications.W011"]
    if vendor == "postgresql":
        assert found == []
    else:
        assert len(found) == 1 and "not PostgreSQL" in found[0][1]
    with override_settings(NOTIFICATIONS_LISTEN_DATABASE="postgresql://site:pw@db.internal:5432/site"):
        assert "notifications.W011" not in ids()
