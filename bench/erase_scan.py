"""How long `erase(address=...)` takes to find a person among many rows (issue 45 #10).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python -m bench.erase_scan --rows 100000

Fills a throwaway database with `--rows` email rows to other people (plus a few of the
person's own, one of them shared) and indexes them as the migration's backfill does (the
fill's `bulk_create` writes no `AddressKey`; timed: `index`), then times `erase()` and its
dry run (`describe`) for one address, and the admin's confirmation page for erasing
`--people` people (a `describe` each), `--repeats` times each; prints the medians.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.common import migrated_site

PERSON = "grace@example.org"


def fill(rows: int) -> None:
    from django.utils import timezone

    from notifications.models import Notification

    later = timezone.now() + timezone.timedelta(days=30)
    batch = [
        Notification(
            channels=["email"],
            email_to=[f"Reader {n} <reader{n}@example.com>"],
            email_cc=[f"cc{n}@example.net"] if n % 3 == 0 else [],
            subject="News",
            body="Hello",
            timezone="UTC",
            next_fire_at=later,
        )
        for n in range(rows)
    ]
    Notification.objects.bulk_create(batch, batch_size=2000)


def mine() -> None:
    from notifications.api import schedule

    schedule(channels=["email"], email_to="Grace <GRACE@example.org>", subject="Hi", body="x")
    schedule(channels=["email"], email_to=["bob@example.com"], email_bcc=[PERSON], subject="Hi", body="x")


def index() -> float | None:
    """Index the filled rows (None: a checkout before the index, which scans instead)."""
    try:
        from notifications.models.address_keys import index_all
    except ImportError:
        return None
    return timed(index_all)


def timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--people", type=int, default=20, help="people on the admin's confirmation page")
    args = parser.parse_args()
    with migrated_site():
        from django.db import connection

        from notifications.services import erasure

        fill(args.rows)
        indexing = index()
        # The confirmation page's people: the person and readers of the fill (one row or two each).
        people = [PERSON] + [f"reader{n * 997 % args.rows}@example.com" for n in range(1, args.people)]
        dry, run, page = [], [], []
        for _ in range(args.repeats):
            mine()
            dry.append(timed(lambda: erasure.describe(erasure.person(address=PERSON))))
            page.append(timed(lambda: [erasure.describe(erasure.person(address=a)) for a in people]))
            run.append(timed(lambda: erasure.erase(address=PERSON)))
        print(
            f"{connection.vendor}, {args.rows:,} rows"
            + (f" (indexed in {indexing:.1f}s)" if indexing is not None else " (no index)")
            + f": describe {statistics.median(dry):.3f}s, erase {statistics.median(run):.3f}s, "
            f"confirmation page of {len(people)} people {statistics.median(page):.3f}s (median of {args.repeats})"
        )


if __name__ == "__main__":
    main()
