"""What a firing came to, in memory: the rules that settle a claimed row. No query.

- `kinds`: `Kind`, `Outcome` and the tick's counts (`TICK_COUNTS`).
- `settling`: a firing's channel results applied to its row (`settle_firing`,
  `settle_skipped`, `settle_internal_error`), and rows not sent now (`defer`, `release`,
  `expire`, `dead_letter`). The tick's worker threads call it: it imports nothing that
  reaches the database.
- `holding`: rows held back before they are sent (`Hold`, `held_back`,
  `held_for_setting`, `settle_held`, `CONFIGURATION_HOLD`) and rows that bypassed
  validation (`settle_invalid`).

Each function changes the row in memory and says what should become of it; the tick's
write-back (`notifications.store.writeback.save_outcomes`) stores a batch of them at
once. Import-linter contracts of `make check` keep this package free of the layers
that query (services, the store, flow, health, the tick, the admin), of Django itself,
and of the registry and validation: what a channel or validation said is handed in.
"""

from notifications.outcomes.holding import (
    CONFIGURATION_HOLD,
    Hold,
    held_back,
    held_for_setting,
    settle_held,
    settle_invalid,
)
from notifications.outcomes.kinds import TICK_COUNTS, Kind, Outcome
from notifications.outcomes.settling import (
    dead_letter,
    defer,
    expire,
    release,
    settle_firing,
    settle_internal_error,
    settle_skipped,
)

__all__ = [
    "CONFIGURATION_HOLD",
    "TICK_COUNTS",
    "Hold",
    "Kind",
    "Outcome",
    "dead_letter",
    "defer",
    "expire",
    "held_back",
    "held_for_setting",
    "release",
    "settle_firing",
    "settle_held",
    "settle_internal_error",
    "settle_invalid",
    "settle_skipped",
]
