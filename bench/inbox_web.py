"""The inbox's `inbox/counts` over a large inbox table, on PostgreSQL.

`python bench/inbox_web.py` (`--messages 1000000 --recipients 10000 --requests 300`):
creates a throwaway database on the local PostgreSQL (`--dsn`, default the test
settings' server), migrates it, inserts the messages spread over the recipients (a
quarter read, a tenth archived) with one INSERT ... SELECT from generate_series, then
asks `inbox/counts` through Django's test client as one signed-in user: the first answer
(200, with its ETag) and the badge's usual one (304 for If-None-Match), and
`notifications.inbox.counts()` alone. Prints the median and 95th percentile in
milliseconds and the counts query's plan; drops the database.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/inbox_web.py`: the repository


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"median {statistics.median(ordered) * 1000:.2f} ms, p95 {p95 * 1000:.2f} ms"


def timed(function, repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        samples.append(time.perf_counter() - started)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--recipients", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=300)
    options = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings_postgres")
    import django
    from django.conf import settings

    name = f"bench_inbox_web_{os.getpid()}"
    settings.DATABASES["default"]["NAME"] = name
    settings.DATABASES["default"]["TEST"] = {"NAME": name}
    django.setup()
    from django.db import connection
    from django.test.utils import get_runner

    runner = get_runner(settings)(verbosity=0, interactive=False)
    old = runner.setup_databases()  # creates and migrates the throwaway database
    try:
        run(options, connection)
    finally:
        runner.teardown_databases(old)


def run(options: argparse.Namespace, connection) -> None:
    from django.contrib.auth import get_user_model
    from django.db.models import Count, Q
    from django.test import Client

    from notifications import inbox
    from notifications.models import InboxMessage

    user = get_user_model().objects.create_user("bench")
    me = f"user:{user.pk}"
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO notifications_inboxmessage
                (id, recipient, category, title, body, url, data, created_at, seen_at, read_at, archived_at,
                 notification_id, firing_id)
            SELECT gen_random_uuid(),
                   CASE WHEN n %% %(recipients)s = 1 THEN %(me)s ELSE 'user:r' || (n %% %(recipients)s) END,
                   '', 'Message ' || n, 'Body', '', '{}',
                   now() - n * interval '1 second',
                   CASE WHEN n %% 2 = 0 THEN now() END,
                   CASE WHEN n %% 4 = 0 THEN now() END,
                   CASE WHEN n %% 10 = 0 THEN now() END,
                   1, gen_random_uuid()
            FROM generate_series(1, %(messages)s) AS n
            """,
            {"recipients": options.recipients, "me": me, "messages": options.messages},
        )
        cursor.execute("ANALYZE notifications_inboxmessage")
    print(f"inserted {options.messages:,} messages over {options.recipients:,} recipients "
          f"in {time.perf_counter() - started:.1f} s")  # fmt: skip

    client = Client()
    client.force_login(user)
    first = client.get("/notifications/inbox/counts")
    assert first.status_code == 200, first.status_code
    etag = first["ETag"]
    print(f"the user's counts: {first.json()}")
    assert client.get("/notifications/inbox/counts", headers={"If-None-Match": etag}).status_code == 304

    for _ in range(20):  # warm the caches
        inbox.counts(me)

    def fresh() -> object:
        return client.get("/notifications/inbox/counts")

    def unchanged() -> object:
        return client.get("/notifications/inbox/counts", headers={"If-None-Match": etag})

    print(f"counts() alone:                    {percentiles(timed(lambda: inbox.counts(me), options.requests))}")
    print(f"inbox/counts, 200 with ETag:       {percentiles(timed(fresh, options.requests))}")
    print(f"inbox/counts, 304 (If-None-Match): {percentiles(timed(unchanged, options.requests))}")
    with connection.cursor() as cursor:
        sql, params = (
            InboxMessage.objects.filter(recipient=me, archived_at__isnull=True)
            .values("recipient")
            .annotate(unread=Count("recipient", filter=Q(read_at__isnull=True)))
            .query.sql_with_params()
        )
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        print("the counts query's plan (grouped form):")
        print("\n".join(f"  {row[0]}" for row in cursor.fetchall()))


if __name__ == "__main__":
    main()
