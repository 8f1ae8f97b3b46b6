"""A tick's write-back: finished batches stored in one short transaction, then counted.

Each write takes the database's write lock; on SQLite the host site's own writes wait for
it, so a draining tick writes a few times a second (`WRITE_INTERVAL`), not once per batch.
What the write-back stores: each batch's outcomes, the delivery log's records (built
here, in the tick's own thread, from the channel results the workers handed back), the
rows its claim could not load (dead-lettered), and what it adds to the monitoring totals
(`delivery_counts`, for `notifications.services.tallies`). Then the circuit breakers
observe what was written, the public signals go out, and the tick's report counts it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime

from django.utils import timezone

from notifications import otel, registry, services
from notifications.channels import ChannelResult, Firing
from notifications.conf import Policy
from notifications.flow.control import FlowControl
from notifications.flow.targets import channel_target
from notifications.models import DeliveryAttempt
from notifications.models.log import SENT_TO_CHARS, SUMMARY_CHARS
from notifications.outcomes import Kind, Outcome
from notifications.services import reconnecting
from notifications.services.claims import release_tokens
from notifications.services.persisting import Unloadable
from notifications.services.tallies import DEAD_LETTERED, DEFERRED, DELIVERED, EXPIRED, FAILED, OTHER, Key
from notifications.tick.dispatch import Batch
from notifications.tick.report import HELD, TickReport

logger = logging.getLogger("notifications.tick")

# Claims and write-backs take the database's write lock, which on SQLite is the host
# site's too: a draining tick writes finished batches back at most this often (seconds).
WRITE_INTERVAL = 0.25


class Writer:
    """The batches of one tick waiting for their write-back, and the write itself."""

    def __init__(
        self,
        flow: FlowControl,
        report: TickReport,
        policy: Policy,
        *,
        fixed_now: datetime | None,
        on_outcome: Callable[[Outcome], None] | None,
    ) -> None:
        self.flow = flow
        self.report = report
        self.policy = policy
        self.fixed_now = fixed_now
        self.on_outcome = on_outcome
        self.finished: list[Batch] = []  # batches with every outcome, not yet written back
        self.next_write = time.monotonic()

    def write_back(self, *, force: bool, last: bool = False) -> Exception | None:
        """Write finished batches back in one transaction, at most every WRITE_INTERVAL.

        `force` writes at once (nothing in flight, or the tick is ending). `save_outcomes`
        retries a lost connection or deadlock itself. When it still fails, the batches wait
        for the next write and the error is returned (the tick then claims no more and ends
        once what it holds is done); the `last` write that fails raises it (see `abandon`).
        """
        if not self.finished or (not force and time.monotonic() < self.next_write):
            return None
        batches, self.finished = self.finished, []
        counts = delivery_counts(o for b in batches for o in b.outcomes)
        try:
            dead = services.save_outcomes(
                [(b.token, b.outcomes) for b in batches],
                [a for b in batches for a in b.attempts],
                counts,
                unloadable=[Unloadable(b.token, b.now, b.unloadable) for b in batches if b.unloadable],
                policy=self.policy,
            )
        except reconnecting.DATABASE_ERRORS as exc:
            if last:
                self.abandon(batches)
                raise
            code = reconnecting.error_code(exc)
            logger.error("write-back failed; kept for the next one: %s (%s)", type(exc).__name__, code)
            self.finished = batches + self.finished
            self.next_write = time.monotonic() + WRITE_INTERVAL
            return exc
        if dead:  # rows the claims could not load
            self.report.tally[Kind.DEAD_LETTERED] += dead
        otel.count_deliveries(counts)
        self.observe([o for b in batches for o in b.outcomes])
        self.next_write = time.monotonic() + WRITE_INTERVAL
        for batch in batches:
            services.announce(batch.outcomes)
            self.report.tally.update(o.kind for o in batch.outcomes)
            self.report.holds.update(o.detail for o in batch.outcomes if o.detail and o.detail.startswith(HELD))
            if self.on_outcome:
                for each in batch.outcomes:
                    self.on_outcome(each)
        return None

    def observe(self, written: list[Outcome]) -> None:
        """The breakers' bookkeeping: a missed observation must not fail a tick that wrote its rows."""
        now = self.fixed_now or timezone.now()
        try:
            reconnecting.retry(lambda: self.flow.observe(written, now), "breakers")
        except reconnecting.DATABASE_ERRORS as exc:
            logger.error("circuit breakers not updated: %s", type(exc).__name__)

    def abandon(self, batches: list[Batch]) -> None:
        """The write-back gave up for good: release the rows of `batches` that were not sent
        (released, deferred or held: nothing went out), so they do not wait for the lease.

        Rows that were sent keep their claim: releasing them would make them due at once
        and send them again, the very duplicate the write-back's retries are there to
        avoid. Their outcome is lost with the database; when the lease ends another tick
        sends them again (at least once, as after a tick killed between send and write).
        """
        unsent = [o.row.pk for b in batches for o in b.outcomes if o.kind in (Kind.RELEASED, Kind.DEFERRED)]
        try:
            release_tokens([b.token for b in batches], only=unsent)
        except reconnecting.DATABASE_ERRORS:
            logger.error("%d unsent rows stay claimed until the lease ends", len(unsent))


def attempt_records(firing: Firing | None, results: list[ChannelResult]) -> list[DeliveryAttempt]:
    """The delivery log's records of one firing: one per channel result."""
    if firing is None:
        return []
    return [
        DeliveryAttempt(
            notification_id=firing.notification.pk,
            # The firing's own id: a recurring row holds its next firing's by now.
            firing_id=uuid.UUID(firing.firing_id),
            channel=r.channel,
            target=channel_target(firing.notification, r.channel),
            recipient=firing.notification.recipient,
            sent_to=clip(r.sent_to, SENT_TO_CHARS),
            summary=clip(r.summary, SUMMARY_CHARS),
            outcome=DeliveryAttempt.Outcome.OK if r.ok else DeliveryAttempt.Outcome.FAILED,
            error=r.error or "",
            error_class=r.error_class.value if r.error_class and not r.ok else "",
            http_status=r.http_status,
            duration_ms=round(r.duration * 1000),
            attempted_at=firing.fired_at,
        )
        for r in results
    ]


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, an ellipsis saying so."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def delivery_counts(outcomes: Iterable[Outcome]) -> Counter[Key]:
    """What a batch's outcomes add to the delivery totals (see `notifications.services.tallies`):
    deliveries by channel, target and outcome."""
    counts: Counter[Key] = Counter()
    for outcome in outcomes:
        row, kind = outcome.row, outcome.kind
        if kind == Kind.RELEASED:
            continue
        for result in outcome.results:
            counts[(result.channel, channel_target(row, result.channel), DELIVERED if result.ok else FAILED)] += 1
        # A row written around validation may name any channel: counted as `other`.
        owed = [channel if registry.known(channel) else OTHER for channel in row.owed_channels]
        if kind == Kind.DEFERRED:
            counts.update((channel, channel_target(row, channel), DEFERRED) for channel in owed)
        elif kind == Kind.EXPIRED:
            counts.update((channel, channel_target(row, channel), EXPIRED) for channel in owed)
        elif kind in (Kind.DEAD_LETTERED, Kind.RETRIED):
            failed = [r.channel for r in outcome.results if not r.ok]
            if not outcome.results:  # an internal error or an invalid row: nothing was attempted
                failed = owed
                counts.update((channel, channel_target(row, channel), FAILED) for channel in failed)
            if kind == Kind.DEAD_LETTERED:
                counts.update((channel, channel_target(row, channel), DEAD_LETTERED) for channel in failed)
    return counts
