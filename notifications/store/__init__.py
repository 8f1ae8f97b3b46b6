"""The tick's gateway to the database: every statement a tick runs, asked of this package.

The tick asks for its next batch (`next_batch`): due rows, loaded and checked (a row
written around validation comes apart: `Claim.refused`), and whole digests whose window
has ended, under the same claim token;
files rows that wait for a digest (`file_due`), writes each finished batch back in one
short transaction fenced by its claim token (`WriteBack`, `save_outcomes`), makes rows
held behind a circuit that closed due again (`release_held`), hands back rows it did not
send (`release_tokens`), keeps the claims of rows it still holds (`renew`), and ends
with its housekeeping and record (`prune`, `record_tick`). A lost connection or deadlock is retried (`reconnecting`).

The modules, each importing only those above it in this list:

- `reconnecting`: which database errors are retried, and the retry itself.
- `claims`: `Claim`, `claim`, `check`, `release_tokens`, `renew`, `release_held`, `load_defensively`.
- `statements`: rows locked in one order, multi-row INSERTs, per-row UPDATEs.
- `tallies`: the monitoring totals (`Tally`) the write-back and the tick record add to.
- `digests`: filing rows into digests, claiming whole digests, settling one as one.
- `batches`: `next_batch`, a tick's due rows and due digests under one token.
- `escalations`: `settle_cancelled`, escalations whose message reached its state.
- `writeback`: `WriteBack`, `save_outcomes`, `attempt_records`, `delivery_counts`, `suppress`.
- `housekeeping`: `prune_history`, `prune`, `record_tick`.

Nothing here calls back into a layer above: what the tick's flow control, report and
signals make of a write is the tick's, once the write is done. The host API and the
operators' actions (`notifications.services`) use `claims.load_defensively`,
`statements` and `digests` too.
"""

from __future__ import annotations

from notifications.store.batches import next_batch
from notifications.store.claims import Claim, Refused, release_held, release_tokens, renew
from notifications.store.digests import file_due
from notifications.store.escalations import settle_cancelled
from notifications.store.housekeeping import prune, prune_history, record_tick
from notifications.store.reconnecting import DATABASE_ERRORS, error_code, retry
from notifications.store.writeback import WriteBack, Written, attempt_records, save_outcomes, suppress

__all__ = [
    "DATABASE_ERRORS",
    "Claim",
    "Refused",
    "WriteBack",
    "Written",
    "attempt_records",
    "error_code",
    "file_due",
    "next_batch",
    "prune",
    "prune_history",
    "record_tick",
    "release_held",
    "release_tokens",
    "renew",
    "retry",
    "save_outcomes",
    "settle_cancelled",
    "suppress",
]
