"""The claim's escalation filter over a large inbox table (issue 42 #5), on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python -m bench.escalation_claim

Fills a throwaway database with `--messages` inbox messages of rows long gone (`--read`
of them read), `--escalations` rows waiting as a due escalation, each with its message
(a third of those read: cancelled), and `--due` ordinary due rows; then prints EXPLAIN
(ANALYZE, BUFFERS) of the two statements a tick runs against the inbox table: the claim's
selection (`store.claims.selection`, which leaves cancelled escalations out) and the
probe for cancelled ones (`store.escalations.settle_cancelled`). Says whether either plan
reads the inbox table sequentially. The database is dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from bench.common import throwaway_database

GONE = 10_000_000  # the filler messages' row ids: rows purged long ago


def fill(options: argparse.Namespace) -> None:
    from django.db import connection
    from django.utils import timezone

    from notifications.models import Notification

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO notifications_inboxmessage
                (id, recipient, category, title, body, url, data, created_at, seen_at, read_at, archived_at,
                 notification_id, firing_id)
            SELECT gen_random_uuid(), 'user:' || (n %% 10000), '', 'Message ' || n, 'Body', '', '{}',
                   now() - n * interval '1 second',
                   CASE WHEN n %% 1000 < %(read)s THEN now() END,
                   CASE WHEN n %% 1000 < %(read)s THEN now() END,
                   NULL, %(gone)s + n, gen_random_uuid()
            FROM generate_series(1, %(messages)s) AS n
            """,
            {"messages": options.messages, "read": int(options.read * 1000), "gone": GONE},
        )
    print(f"inserted {options.messages:,} messages ({options.read:.0%} read) in {time.perf_counter() - started:.1f} s")

    past = timezone.now() - timezone.timedelta(minutes=5)
    waiting = [
        Notification(
            channels=["inbox"],
            recipient=f"user:{n}",
            email_to=[f"u{n}@example.com"],
            subject="Invoice due",
            body="Please pay.",
            timezone="UTC",
            escalate_after=3600,
            escalate_to=["email"],
            escalation_of=None,
            next_fire_at=past,
        )
        for n in range(options.escalations)
    ]
    ordinary = [
        Notification(
            channels=["email"],
            email_to=[f"o{n}@example.com"],
            subject="Hi",
            body="x",
            timezone="UTC",
            next_fire_at=past,
        )
        for n in range(options.due)
    ]
    Notification.objects.bulk_create(waiting + ordinary, batch_size=2000)
    with connection.cursor() as cursor:
        # Each escalation waits on the message of the firing it escalates (`escalation_of`).
        cursor.execute(
            """
            UPDATE notifications_notification SET escalation_of = gen_random_uuid()
            WHERE escalate_after IS NOT NULL
            """
        )
        cursor.execute(
            """
            INSERT INTO notifications_inboxmessage
                (id, recipient, category, title, body, url, data, created_at, seen_at, read_at, archived_at,
                 notification_id, firing_id)
            SELECT gen_random_uuid(), recipient, '', 'Invoice due', 'Please pay.', '', '{}', now() - interval '1 hour',
                   CASE WHEN id % 3 = 0 THEN now() END, CASE WHEN id % 3 = 0 THEN now() END, NULL,
                   id, escalation_of
            FROM notifications_notification WHERE escalation_of IS NOT NULL
            """
        )
        cursor.execute("ANALYZE")


def explain(label: str, statement) -> bool:
    """Print the plan of `statement()` (SQL and parameters, compiled in a transaction);
    True when it reads the inbox table sequentially."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        sql, params = statement()
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, list(params))
        plan = [row[0] for row in cursor.fetchall()]
        transaction.set_rollback(True)  # FOR UPDATE locks, nothing else: leave the rows as they are
    scans = any("Seq Scan on notifications_inboxmessage" in line for line in plan)
    total = next((line for line in plan if line.startswith("Execution Time")), "")
    print(f"\n{label}: {total.strip()}; sequential scan of the inbox table: {'YES' if scans else 'no'}")
    print("\n".join(f"  {line}" for line in plan))
    return scans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--read", type=float, default=0.9, help="the share of the messages that is read")
    parser.add_argument("--escalations", type=int, default=1_000, help="due escalations (a third read in time)")
    parser.add_argument("--due", type=int, default=1_000, help="ordinary due rows beside them")
    parser.add_argument("--limit", type=int, default=100, help="the claim's batch")
    options = parser.parse_args()
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    url = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
    with throwaway_database(url) as database:
        os.environ["BENCH_DATABASE"] = json.dumps(database)
        import django

        django.setup()
        from django.core.management import call_command
        from django.db.models import Q
        from django.utils import timezone

        from notifications.channels import registry
        from notifications.models import Notification
        from notifications.store import claims

        call_command("migrate", verbosity=0)
        fill(options)
        now = timezone.now()
        scans = explain("the claim's selection", lambda: claims.selection(now, options.limit, lock=True))
        cancelled = registry.escalation_cancelled()
        unclaimed = Q(claim_token__isnull=True) | Q(claimed_until__lt=now)
        probe = Notification.objects.filter(unclaimed, cancelled, escalation_of__isnull=False).values("pk")[:1]
        scans |= explain("the probe for cancelled escalations", probe.query.sql_with_params)
        if scans:
            raise SystemExit("a statement reads the whole inbox table")


if __name__ == "__main__":
    main()
