"""Digests as the host API and operators' actions see them: an action on one row of a
digest acts on the whole digest (`with_their_digests`, `chunks`), the open digests
(`open_digests`), and a paused row leaving its digest (`leave`).

How a digest is kept, filed and claimed is the tick's, in `notifications.store.digests`.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db.models import Count, Min, QuerySet

from notifications.models import Notification, states

# Ids per look-up of `with_their_digests`: well inside every database's parameter limit.
LOOKUP_CHUNK = 500


def with_their_digests(pks: Sequence[Any]) -> list[Any]:
    """`pks`, and the ids of every other row of the digests they belong to (an operator
    action on one row of a digest acts on the digest)."""
    digest_ids: set[Any] = set()
    for start in range(0, len(pks), LOOKUP_CHUNK):
        chunk = pks[start : start + LOOKUP_CHUNK]
        digest_ids.update(
            Notification.objects.filter(pk__in=chunk, digest_id__isnull=False).values_list("digest_id", flat=True)
        )
    if not digest_ids:
        return list(pks)
    known = set(pks)
    wanted = sorted(digest_ids)
    extra: list[Any] = []
    for start in range(0, len(wanted), LOOKUP_CHUNK):
        members = Notification.objects.filter(digest_id__in=wanted[start : start + LOOKUP_CHUNK])
        extra.extend(pk for pk in members.values_list("pk", flat=True) if pk not in known)
    return [*pks, *extra]


def chunks(pks: Sequence[Any], size: int) -> list[list[Any]]:
    """`pks` in chunks of `size` ids, in id order, each digest's rows together (in the
    chunk of its lowest id, which grows past `size` by at most one digest's rows).

    An operator action works a chunk at a time, a transaction each, and ticks run between
    chunks: a digest split across two would be requeued (paused, run, purged) half now,
    and a tick could send that half alone. One look-up per LOOKUP_CHUNK ids."""
    ordered = sorted(set(pks))
    digest_of: dict[Any, Any] = {}
    for start in range(0, len(ordered), LOOKUP_CHUNK):
        members = Notification.objects.filter(pk__in=ordered[start : start + LOOKUP_CHUNK], digest_id__isnull=False)
        digest_of.update(members.values_list("pk", "digest_id"))
    if not digest_of:
        return [ordered[start : start + size] for start in range(0, len(ordered), size)]
    rows_of: dict[Any, list[Any]] = defaultdict(list)
    for pk in ordered:
        if pk in digest_of:
            rows_of[digest_of[pk]].append(pk)
    result: list[list[Any]] = []
    chunk: list[Any] = []
    for pk in ordered:
        digest_id = digest_of.get(pk)
        if digest_id is None:
            chunk.append(pk)
        elif digest_id in rows_of:
            chunk.extend(rows_of.pop(digest_id))  # the whole digest, at its first row
        if len(chunk) >= size:
            result.append(sorted(chunk))
            chunk = []
    if chunk:
        result.append(sorted(chunk))
    return result


def open_digests(now: datetime) -> QuerySet[Any, dict[str, Any]]:
    """One entry per open digest (`states.OPEN_DIGEST_ROWS`): `digest_id`, `rows` (how
    many have joined) and `closes_at` (when it goes out: the window's end, or after quiet
    hours or a rate limit), soonest first."""
    return (
        Notification.objects.filter(states.OPEN_DIGEST_ROWS.q(now))
        .values("digest_id")
        .annotate(rows=Count("pk"), closes_at=Min("next_fire_at"))
        .order_by("closes_at")
    )


# --- leaving: a paused row is out of its digest ------------------------------------------------

# What `leave` changes.
LEAVE_FIELDS = (
    "digest_id",
    "next_fire_at",
    "firing_due_at",
    "firing_id",
    "error_count",
    "last_error",
    "pending_channels",
)


def leave(row: Notification) -> None:
    """Take `row` (paused, not in flight) out of its digest, in memory (the caller saves
    LEAVE_FIELDS). The digest goes out without it; once resumed, the row is due at its own
    due time and is filed afresh (it joins its group's open digest, or opens one) as a
    firing of its own: a new `webhook-id` (the digest's may have been delivered already,
    and a receiver would drop a second message with it) and no retries spent (the
    digest's failures were not the row's own)."""
    if row.digest_id is None:
        return
    row.set_due(row.firing_due_at or row.next_fire_at)
    row.digest_id = None
    row.firing_id = uuid.uuid4()
    if row.error_count and row.failed_channels is None and row.dead_lettered_at is None:
        row.last_error = None  # the digest's retry's error
    row.error_count = 0
    row.pending_channels = None
