"""What a firing came to, in memory: the rules that settle a claimed row. No query.

- `kinds`: `Kind`, `Outcome` and the tick's counts (`TICK_COUNTS`).
- `settling`: a firing's channel results applied to its row (`record_firing`,
  `record_skipped`, `record_internal_error`), and rows not sent now (`defer`, `release`,
  `expire`, `dead_letter`). The tick's worker threads call it: it imports nothing that
  reaches the database.
- `holding`: rows held back before they are sent (`Hold`, `held_back`,
  `configuration_hold`, `record_held`, `CONFIGURATION_HOLD`) and rows that bypassed
  validation (`record_invalid`).

Each function changes the row in memory and says what should become of it; the tick's
write-back (`notifications.store.writeback.save_outcomes`) stores a batch of them at
once. An import-linter contract of `make check` keeps this package free of the layers
that query (services, flow, health, the tick, the admin) and of Django itself.
"""

from notifications.outcomes.holding import (
    CONFIGURATION_HOLD,
    Hold,
    configuration_hold,
    held_back,
    record_held,
    record_invalid,
)
from notifications.outcomes.kinds import TICK_COUNTS, Kind, Outcome
from notifications.outcomes.settling import (
    dead_letter,
    defer,
    expire,
    record_firing,
    record_internal_error,
    record_skipped,
    release,
)

__all__ = [
    "CONFIGURATION_HOLD",
    "TICK_COUNTS",
    "Hold",
    "Kind",
    "Outcome",
    "configuration_hold",
    "dead_letter",
    "defer",
    "expire",
    "held_back",
    "record_firing",
    "record_held",
    "record_internal_error",
    "record_invalid",
    "record_skipped",
    "release",
]
