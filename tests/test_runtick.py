"""`manage.py runtick`: options, output, exit status and signals, in-process and as a real process."""

from __future__ import annotations

import re
import signal
from datetime import datetime, timedelta
from io import StringIO
from zoneinfo import ZoneInfo

import pytest
from django.core import mail
from django.core.management import CommandError, call_command
from django.core.management.base import SystemCheckError
from django.utils import timezone

from notifications.api import run_tick
from notifications.conf import app_settings
from notifications.models import DeliveryAttempt, Notification, TickRun
from tests.support.processes import claim_gate, parse_summary, run
from tests.support.servers import Reply

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"  # ISO 8601 to the second, with the offset
OUTCOME_LINE = re.compile(r"^#(\d+) (succeeded|partial|retried|dead_lettered|released)\b")


def runtick(*args: str) -> str:
    out = StringIO()
    call_command("runtick", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def summary_of(output: str) -> dict[str, int]:
    (summary,) = [s for s in map(parse_summary, output.splitlines()) if s is not None]
    return summary


def routed(webhook_server) -> None:
    """/ok answers 200, /fail answers 503."""
    webhook_server.responder = lambda request: Reply(status=200 if request.path == "/ok" else 503)


@pytest.fixture
def one_of_each(make_row, webhook_server):
    """Five due rows, one for each outcome (plus a second success)."""
    routed(webhook_server)
    ok, fail = webhook_server.url("/ok"), webhook_server.url("/fail")
    rows = {
        "email": make_row(),
        "webhook": make_row(channels=["webhook"], webhook_url=ok),
        "retried": make_row(channels=["webhook"], webhook_url=fail),
        "partial": make_row(channels=["email", "webhook"], webhook_url=fail),
        "dead": make_row(channels=["webhook"], webhook_url=fail),
    }
    # The last attempt it has left: this failure dead-letters it.
    Notification.objects.filter(pk=rows["dead"].pk).update(error_count=app_settings.MAX_RETRIES - 1)
    return rows


# --- the summary line and -v 2 ------------------------------------------------------------


def test_summary_line_counts_each_outcome(one_of_each):
    output = runtick()

    assert summary_of(output) == {"claimed": 5, "succeeded": 2, "partial": 1, "retried": 1, "dead_lettered": 1}
    assert re.search(rf"^{STAMP} claimed=5 succeeded=2 partial=1 retried=1 dead_lettered=1\b", output, re.M)


def test_the_summary_line_starts_with_when_the_tick_finished(db, settings):
    settings.TIME_ZONE = "Europe/Berlin"  # the site's zone, with its offset
    before = timezone.now().replace(microsecond=0)
    (line,) = runtick().splitlines()
    stamp, rest = line.split(" ", 1)

    written = datetime.fromisoformat(stamp)
    assert before <= written <= timezone.now()
    assert written.utcoffset() == ZoneInfo("Europe/Berlin").utcoffset(written.replace(tzinfo=None))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", stamp)  # to the second
    assert rest.startswith("claimed=0 succeeded=0 partial=0 retried=0 dead_lettered=0 ")


# --- system checks: errors stop it on one line each, warnings only when --loop starts -----------


def test_a_one_shot_tick_keeps_check_warnings_out_of_its_output(db, settings):
    settings.NOTIFICATIONS_TICK_LIMITT = 5  # a typo: notifications.W005
    out, err = StringIO(), StringIO()
    call_command("runtick", skip_checks=False, stdout=out, stderr=err)

    assert err.getvalue() == ""
    assert summary_of(out.getvalue())["claimed"] == 0
    checked = StringIO()
    call_command("check", stderr=checked)
    assert "notifications.W005" in checked.getvalue()  # `check` still says it


def test_check_errors_stop_the_tick_with_one_line_each(make_row, settings):
    row = make_row()
    settings.NOTIFICATIONS_MAX_RETRIES = 0
    settings.NOTIFICATIONS_TICK_LIMIT = "100"
    with pytest.raises(SystemCheckError) as caught:
        call_command("runtick", skip_checks=False, stdout=StringIO())

    lines = str(caught.value).splitlines()
    assert [re.sub(STAMP, "T", line) for line in lines] == [
        "T runtick did not run: notifications.E001: NOTIFICATIONS_TICK_LIMIT must be a positive integer, not '100'. "
        "(manage.py check gives the hint)",
        "T runtick did not run: notifications.E002: NOTIFICATIONS_MAX_RETRIES must be a positive integer, not 0. "
        "(manage.py check gives the hint)",
    ]
    assert Notification.objects.get(pk=row.pk).claim_token is None
    assert mail.outbox == []


def test_silenced_errors_do_not_stop_it(db, settings):
    settings.NOTIFICATIONS_MAX_RETRIES = 0
    settings.SILENCED_SYSTEM_CHECKS = ["notifications.E002"]
    assert summary_of(runtick())["claimed"] == 0


def test_verbosity_2_prints_one_line_per_row_outcome(one_of_each):
    output = runtick("-v", "2")

    outcomes = {int(m[1]): m[2] for m in map(OUTCOME_LINE.match, output.splitlines()) if m}
    assert outcomes == {
        one_of_each["email"].pk: "succeeded",
        one_of_each["webhook"].pk: "succeeded",
        one_of_each["retried"].pk: "retried",
        one_of_each["partial"].pk: "partial",
        one_of_each["dead"].pk: "dead_lettered",
    }
    assert "webhook: HTTP 503" in output  # failures say why


def test_default_verbosity_prints_only_the_summary(one_of_each):
    output = runtick()

    assert [line for line in output.splitlines() if OUTCOME_LINE.match(line)] == []


def test_empty_queue_prints_a_zero_summary(db):
    assert summary_of(runtick()) == {"claimed": 0, "succeeded": 0, "partial": 0, "retried": 0, "dead_lettered": 0}


# --- --limit, --budget, --dry-run --------------------------------------------------------------


def test_limit_caps_a_batch_and_budget_0_stops_after_one(make_row):
    now = timezone.now()
    rows = [make_row(fire_at=now - timedelta(minutes=10 - n)) for n in range(5)]

    assert summary_of(runtick("--limit", "2", "--budget", "0"))["claimed"] == 2
    # The two oldest went out first.
    assert sorted(Notification.objects.values_list("pk", flat=True)) == [r.pk for r in rows[2:]]
    assert len(mail.outbox) == 2


def test_limit_alone_keeps_claiming_while_rows_are_due(make_row):
    for _ in range(5):
        make_row()

    assert summary_of(runtick("--limit", "2"))["claimed"] == 5
    assert not Notification.objects.exists()
    assert TickRun.objects.get().batches == 3


def test_dry_run_shows_what_is_due_and_changes_nothing(make_row, webhook_server):
    due = [make_row(), make_row(channels=["webhook"], webhook_url=webhook_server.url())]
    later = make_row(fire_at=timezone.now() + timedelta(hours=1))
    before = list(Notification.objects.order_by("pk").values())
    ticks_before = TickRun.objects.count()

    output = runtick("--dry-run")

    for row in due:
        assert re.search(rf"^#{row.pk}\b", output, re.M)
    assert not re.search(rf"^#{later.pk}\b", output, re.M)
    assert "due=2" in output
    assert list(Notification.objects.order_by("pk").values()) == before
    assert mail.outbox == []
    assert webhook_server.received == []
    assert TickRun.objects.count() == ticks_before
    assert not DeliveryAttempt.objects.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--limit", "0"],
        ["--limit", "many"],
        ["--budget", "-1"],
        ["--budget", "soon"],
        ["--budget", "nan"],
        ["--loop", "0"],
        ["--loop", "nan"],
        ["--loop", "-5"],
        ["--bogus"],
    ],
    ids=" ".join,
)
def test_bad_arguments_are_a_command_error(db, args):
    with pytest.raises(CommandError):
        runtick(*args)


# --- as a real process ----------------------------------------------------------------------


@pytest.mark.slow
def test_bad_argument_on_the_command_line_is_a_usage_error(db):
    result = run("--limit", "0")

    assert result.returncode == 2
    assert "usage:" in result.stderr
    assert "--limit" in result.stderr


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_delivery_failures_still_exit_0(make_row, webhook_server):
    webhook_server.reply = Reply(status=503)
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url())

    result = run()

    assert result.returncode == 0, result.stderr
    assert parse_summary(result.stdout)["retried"] == 1
    row.refresh_from_db()
    assert row.error_count == 1


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_misconfiguration_stops_runtick_before_it_claims_anything(make_row):
    row = make_row()
    # A lease shorter than budget + deadline would let a second tick resend a firing.
    short_lease = {"NOTIFICATIONS_LEASE": 3, "NOTIFICATIONS_TICK_BUDGET": 1, "NOTIFICATIONS_CHANNEL_TIMEOUT": 6}
    result = run(settings=short_lease)

    assert result.returncode == 1
    (line,) = result.stderr.splitlines()  # one line for cron's log, no traceback
    assert re.fullmatch(rf"{STAMP} runtick did not run: notifications\.E008: NOTIFICATIONS_LEASE \(3s\) .*", line)
    assert result.stdout == ""
    row.refresh_from_db()
    assert row.claim_token is None
    assert mail.outbox == []


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_loop_ticks_repeatedly_and_stops_cleanly_on_a_signal(make_row, webhook_server, children, signum):
    child = children.start("--loop", "0.5")
    child.wait_for_output(lambda c: len(c.summaries()) >= 1)
    # Work that appears while the loop runs is picked up by a later tick.
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url())
    child.wait_for_output(lambda c: any(s["succeeded"] == 1 for s in c.summaries()))
    child.wait_for_output(lambda c: len(c.summaries()) >= 3)

    child.send(signum)

    assert child.wait(15) == 0
    assert [r.headers["webhook-id"] for r in webhook_server.received] == [f"msg_{row.firing_id}"]
    assert not Notification.objects.exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_loop_says_its_warnings_once_and_reports_its_start_and_stop(make_row, children):
    make_row()
    child = children.start("--loop", "0.2", settings={"NOTIFICATIONS_TICK_LIMITT": 5})
    child.wait_for_output(lambda c: len(c.summaries()) >= 4)
    child.send(signal.SIGTERM)
    assert child.wait(15) == 0

    warned = [line for line in child.stderr.splitlines() if "notifications.W005" in line]
    assert len(warned) == 1  # at the start, not at every tick
    assert re.fullmatch(
        rf"{STAMP} runtick --loop: notifications\.W005: NOTIFICATIONS_TICK_LIMITT .* Hint: .*", warned[0]
    )
    lines = child.stdout.splitlines()
    assert re.fullmatch(rf"{STAMP} runtick --loop: one tick every 0\.2s.*; SIGTERM or SIGINT stops it", lines[0])
    ticks = len(child.summaries())
    assert re.fullmatch(
        rf"{STAMP} runtick --loop: stopped after {ticks} ticks; in all claimed 1, succeeded 1, partial 0, .*",
        lines[-1],
    )
    assert all(re.match(STAMP, line) for line in lines)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_loop_survives_a_failing_tick(make_row, webhook_server, children, on_postgres):
    row = make_row(channels=["webhook"], webhook_url=webhook_server.url())
    # The child gives up waiting for a lock after half a second: its claim fails, as it
    # would while the database restarts.
    short_wait = {"options": "-c lock_timeout=500"} if on_postgres else {"timeout": 0.5}

    with claim_gate():
        child = children.start("--loop", "0.5", db_options=short_wait)
        child.wait_for_output(lambda c: c.stderr.count("tick failed") >= 2)
    child.wait_for_output(lambda c: any(s["succeeded"] == 1 for s in c.summaries()))
    child.send(signal.SIGTERM)

    assert child.wait(15) == 0
    assert [r.headers["webhook-id"] for r in webhook_server.received] == [f"msg_{row.firing_id}"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_single_tick_failure_is_a_non_zero_exit(make_row, children, on_postgres):
    make_row()
    short_wait = {"options": "-c lock_timeout=500"} if on_postgres else {"timeout": 0.5}

    with claim_gate():
        child = children.start(db_options=short_wait)
        code = child.wait(60)

    assert code == 1  # cron reports it; the row is still due for the next tick
    assert "OperationalError" in child.stderr
    assert Notification.objects.get().claim_token is None


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_sigterm_mid_tick_finishes_in_flight_rows_and_releases_the_rest(make_row, webhook_server, children):
    webhook_server.reply = Reply(delay=1.5)  # slow enough that the signal lands mid-tick
    rows = [make_row(channels=["webhook"], webhook_url=webhook_server.url(), payload={"n": n}) for n in range(10)]
    by_id = {f"msg_{row.firing_id}": row.pk for row in rows}

    child = children.start(settings={"NOTIFICATIONS_CONCURRENCY": 2, "NOTIFICATIONS_CHANNEL_TIMEOUT": 5})
    webhook_server.wait_for(1, timeout=60)
    child.send(signal.SIGTERM)

    assert child.wait(20) == 0
    assert "received signal" in child.stderr
    (summary,) = child.summaries()
    sent = webhook_server.webhook_ids()
    assert all(n == 1 for n in sent.values())
    delivered = {by_id[i] for i in sent}
    left = {row.pk: row for row in Notification.objects.all()}
    # In flight when the signal came: finished and written back. Never started: released.
    assert set(left) == set(by_id.values()) - delivered
    assert summary["succeeded"] == len(delivered) >= 1
    assert left, "every row was sent: the signal did not stop the tick"
    assert f"released={len(left)}" in child.stdout
    now = timezone.now()
    for row in left.values():
        assert row.claim_token is None and row.claimed_until is None
        assert row.next_fire_at <= now and row.error_count == 0 and row.last_error is None

    # Nothing is lost: the next tick sends exactly the rest.
    webhook_server.reply = Reply()
    assert run_tick().counts()["succeeded"] == len(left)
    assert set(webhook_server.webhook_ids()) == set(by_id)
    assert all(n == 1 for n in webhook_server.webhook_ids().values())
    assert not Notification.objects.exists()


# --- the project is consistent --------------------------------------------------------------


def test_models_and_migrations_agree(db):
    # Exits with status 1 when a model change has no migration.
    call_command("makemigrations", "--check", "--dry-run", stdout=StringIO())


@pytest.mark.django_db  # Django 6's model checks ask the database about JSON support
def test_system_checks_are_clean():
    out = StringIO()
    call_command("check", "--fail-level", "WARNING", stdout=out, stderr=StringIO())
    assert "no issues" in out.getvalue()
