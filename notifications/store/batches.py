"""A tick's next batch: its due rows and, when the tick wants them, the whole digests whose
window has ended, under one claim token (`next_batch`). The tick asks for a batch once;
how it is made up is the store's."""

from __future__ import annotations

import logging
from datetime import datetime

from notifications.store import claims, digests, reconnecting

logger = logging.getLogger("notifications.tick")


def next_batch(
    now: datetime, limit: int, lease: float, *, with_digests: bool, queues: tuple[str, ...] = ()
) -> claims.Claim:
    """Claim up to `limit` due rows (`claims.claim`), then, `with_digests`, up to `limit`
    digests with the same token (`digests.claim_into`: `Claim.more_digests` says whether
    more may be due); `queues`: only rows of those queues (empty: all; digests are in
    `default`). A digests' claim that fails beyond its retries hands the rows back, due
    again at once, and raises: nothing of the batch reached a worker."""
    claimed = claims.claim(now, limit, lease, queues=queues)
    claimed.due = claimed.size
    if not with_digests:
        return claimed
    try:
        claimed.more_digests = digests.claim_into(claimed, now, limit, lease)
    except reconnecting.DATABASE_ERRORS:
        try:
            reconnecting.retry(lambda: claims.release_tokens([claimed.token]), "release")
        except reconnecting.DATABASE_ERRORS:
            logger.error("could not release a claimed batch: its rows wait for the lease to end")
        raise
    return claimed
