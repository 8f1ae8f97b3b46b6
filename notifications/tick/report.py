"""What one tick did (`TickReport`): counts only, for the summary line and monitoring."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from notifications.outcomes import TICK_COUNTS, Kind

# How an outcome's detail starts when a setting held the row (`outcomes.held_back`).
HELD = "held: "


class Counts(dict[str, int]):
    """A tick's counts by name; a count left out of the listing (`skipped` at 0) reads 0."""

    def __missing__(self, name: str) -> int:
        if name in TICK_COUNTS:
            return 0
        raise KeyError(name)


@dataclass
class TickReport:
    """What one tick did, for the summary line and for monitoring.

    Only counts are kept, so a tick's memory does not grow with the rows it drains;
    `run_tick(on_outcome=...)` sees every row's outcome as its batch is written.
    """

    started_at: datetime
    finished_at: datetime | None = None
    batches: int = 0
    tally: Counter[Kind] = field(default_factory=Counter)
    # Rows held for a setting, by reason (`held: webhook: no signing secret ...`): what the
    # summary's `deferred` does not say, and what `notifications_status` reads back.
    holds: Counter[str] = field(default_factory=Counter)

    @property
    def claimed(self) -> int:
        return sum(self.tally.values())

    def counts(self) -> dict[str, int]:
        counts = Counts({name: self.claimed if name == "claimed" else self.tally[Kind(name)] for name in TICK_COUNTS})
        if not counts["skipped"]:  # recipients' choices: listed once something was skipped (still reads 0)
            del counts["skipped"]
        return counts

    def held(self) -> str:
        """The holds for a setting, one `N rows held: reason` each (blank: none)."""
        return "; ".join(f"{n} held: {reason.removeprefix(HELD)}" for reason, n in self.holds.most_common())

    def summary(self) -> str:
        counts = self.counts()
        if not counts["released"]:
            del counts["released"]
        line = " ".join(f"{name}={value}" for name, value in counts.items())
        if self.finished_at:
            line += f" seconds={(self.finished_at - self.started_at).total_seconds():.2f}"
        return line
