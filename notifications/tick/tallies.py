"""What a batch's outcomes add to the monitoring totals (`notifications.services.tallies`):
deliveries by channel, target and outcome. Computed by the tick, which knows the targets
(`notifications.flow.targets`), and handed to the write-back."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from notifications import registry
from notifications.flow.targets import channel_target
from notifications.services import Kind, Outcome
from notifications.services.tallies import DEAD_LETTERED, DEFERRED, DELIVERED, EXPIRED, FAILED, OTHER, Key


def delivery_counts(outcomes: Iterable[Outcome]) -> Counter[Key]:
    """What a batch's outcomes add to the delivery totals (see `notifications.services.tallies`)."""
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
