"""What recipients chose, applied to a claimed batch before it is sent.

A row of a category (`NOTIFICATIONS_CATEGORIES`) that is not required goes through
`screen` in the tick's own thread, once per batch:

- Each owed channel asks the channel whose preferences count (`Channel.recipient_keys`:
  the row's `recipient`; for email without one, each address). A channel every key of
  which turned the category off is **skipped**: not sent, no retry spent, logged as an
  attempt with outcome `skipped`. Where only some keys did, the channel leaves those out
  (`Channel.leave_out`: email drops the addresses, as it drops suppressed ones).
- A category's `throttle` lets at most N firings reach one recipient per window
  (`notifications.flow.throttle`); the rest are skipped with outcome `throttled`. A firing
  counted here that flow control then defers is given back (`give_back`): it counts when
  it goes out.
- A firing all of whose channels were skipped settles like a success
  (`outcomes.settle_skipped`); a row with channels left owes only those in this tick.

Preferences are read in one query per batch; a throttle costs one statement per recipient
and category the batch holds. A site with no categories pays nothing.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from notifications import outcomes
from notifications.channels import Channel
from notifications.conf import Policy, categories
from notifications.flow import throttle
from notifications.flow.targets import RowTargets, Targets
from notifications.models import DeliveryAttempt, Notification, Preference
from notifications.outcomes import Outcome
from notifications.rules import categories as rules
from notifications.store import tallies

logger = logging.getLogger("notifications.tick")

SKIPPED = DeliveryAttempt.AttemptOutcome.SKIPPED
THROTTLED = DeliveryAttempt.AttemptOutcome.THROTTLED


@dataclass
class Screened:
    """A batch after `screen`: the rows to send (owing only the channels not skipped),
    the outcomes of rows with nothing left to send, and the skipped channels' records."""

    send: list[Notification]
    settled: list[Outcome] = field(default_factory=list)
    attempts: list[DeliveryAttempt] = field(default_factory=list)


def screen(
    rows: Sequence[Notification], channels: Mapping[str, Channel], now: datetime, targets: RowTargets
) -> Screened:
    """Apply recipients' choices and throttles to `rows` (claimed, valid, due to go now;
    `targets`: each row's, for the records of the channels skipped)."""
    known = categories()
    chosen = [r for r in rows if r.category in known and not known[r.category].required]
    if not chosen:
        return Screened(send=list(rows))
    keys = {row.pk: {name: _keys(row, name, channels) for name in row.owed_channels} for row in chosen}
    every_key = {k for per_row in keys.values() for ks in per_row.values() for k in ks}
    choices = Preference.objects.choices_of(every_key) if every_key else {}  # one query per batch

    skipped: dict[int, dict[str, str]] = defaultdict(dict)  # row pk -> channel -> outcome
    for row in chosen:
        category = known[row.category]
        for name, row_keys in keys[row.pk].items():
            if not row_keys:
                continue  # nobody to ask: sent
            off = [k for k in row_keys if not rules.enabled(category, name, choices.get(k, {}))]
            if len(off) == len(row_keys):
                skipped[row.pk][name] = SKIPPED
            elif off and name in channels:
                channels[name].leave_out(row, off)
    _throttle(chosen, keys, skipped, known, now)

    result = Screened(send=[])
    by_category: Counter[tuple[str, str]] = Counter()
    for row in rows:
        gone = skipped.get(row.pk)
        if not gone:
            result.send.append(row)
            continue
        owed = row.owed_channels
        result.attempts += [_record(row, name, outcome, now, targets[row.pk]) for name, outcome in gone.items()]
        left = [name for name in owed if name not in gone]
        if left:
            row.pending_channels = left  # in memory: this firing owes only these now
            result.send.append(row)
        else:
            try:
                result.settled.append(outcomes.settle_skipped(row, now))
            except Exception as exc:  # a schedule that cannot advance: a poison row costs only itself
                logger.exception("notification %s: internal error", row.pk)
                result.settled.append(outcomes.settle_internal_error(row, exc, now, Policy.from_settings()))
                continue
            reason = THROTTLED if THROTTLED in gone.values() else SKIPPED
            by_category[(row.category, str(reason))] += 1
    if by_category:
        tallies.add_skipped(by_category)
    return result


def _keys(row: Notification, name: str, channels: Mapping[str, Channel]) -> list[str]:
    channel = channels.get(name)
    if channel is None:
        return [row.recipient] if row.recipient else []
    return [k for k in channel.recipient_keys(row) if k]


def _throttle(
    rows: list[Notification],
    keys: Mapping[int, Mapping[str, list[str]]],
    skipped: dict[int, dict[str, str]],
    known: Mapping[str, rules.Category],
    now: datetime,
) -> None:
    """Skip, as `throttled`, the rows past their category's throttle for their recipient
    (the row's `recipient`, else the first key a channel gives), in batch order. A retry
    is neither counted nor throttled: its firing counted when it first went out."""
    wanting: dict[tuple[str, str], list[Notification]] = defaultdict(list)
    for row in rows:
        limit = known[row.category].throttle
        left = [name for name in row.owed_channels if name not in skipped.get(row.pk, {})]
        if limit is None or not left:
            continue
        if row.error_count:
            continue  # a retry: its firing was counted when it first went out, and goes again
        recipient = row.recipient or next((k for name in left for k in keys[row.pk][name]), "")
        if recipient:
            wanting[(row.category, recipient)].append(row)
    if wanting:
        throttle.prune_stale(now.timestamp())
    for (category, recipient), waiting in wanting.items():
        limit = known[category].throttle
        assert limit is not None
        granted = throttle.take(category, recipient, limit, len(waiting), now.timestamp())
        for row in waiting[:granted]:
            row.throttle_counted = (category, recipient)  # given back if flow control defers it
        for row in waiting[granted:]:
            for name in row.owed_channels:
                skipped[row.pk].setdefault(name, THROTTLED)


def give_back(rows: Iterable[Notification], now: datetime) -> None:
    """Rows `screen` counted against their throttle at `now` that are not sent now after
    all (flow control deferred them): their count goes back, one statement per recipient
    and category, so a firing counts once, when it goes out (it is screened again when it
    comes back). Without it, a recipient got fewer than N per window."""
    returned: Counter[tuple[str, str]] = Counter()
    for row in rows:
        if row.throttle_counted is not None:
            returned[row.throttle_counted] += 1
            row.throttle_counted = None
    if not returned:
        return
    known = categories()
    for (category, recipient), n in returned.items():
        limit = known[category].throttle if category in known else None
        if limit is not None:
            throttle.give_back(category, recipient, limit, n, now.timestamp())


def _record(row: Notification, channel: str, outcome: str, now: datetime, targets: Targets) -> DeliveryAttempt:
    return DeliveryAttempt(
        notification_id=row.pk,
        firing_id=row.firing_id,
        channel=channel,
        recipient=row.recipient,
        target=targets.get(channel, ""),
        outcome=outcome,
        attempted_at=now,
    )
