"""The host's and the operators' writes: what the API, the admin and the commands change.
The tick's own statements (claims, write-back, digests, totals, housekeeping) are
`notifications.store`'s.

- Creating and editing: `schedule_notification` (the API's `schedule()`; with a `key`,
  `_save_keyed` lets the key's unique constraint settle races) and `edit` (the admin's
  add and change pages) share one due-time rule, `start`.
- Operator actions: `purge` and `cancel`, and the `RowAction`s `REQUEUE`, `RUN_NOW`,
  `PAUSE` and `RESUME`, which `act` applies to rows re-read under lock (the admin's
  actions and buttons) and `requeue`, `run_now`, `pause`, `resume` to one row or key
  (the API). `refusal` says why one does not apply to a row.

What each state means is `notifications.models.states`; the claim itself is `notifications.store.claims`.

The modules, each importing only those above it in this list:

- `creating`: `schedule_notification` and its keyed insert or replace, `edit`, `start`,
  `prepare` (schedule()'s validation, once, in Python).
- `inserting`: rows validated already, inserted one or many at a time (multi-row INSERTs);
  a constraint's refusal as a ValidationError naming the field.
- `enqueueing`: `schedule_many` (all or none, keys as a run of schedule() calls).
- `digests`: an action on one row of a digest acts on all of it; a paused row leaves its
  digest.
- `actions`: operator actions on rows in bulk: `ActionResult`, `RowAction`, `act`,
  `requeue` (`REQUEUE`), `purge`.
- `lifecycle`: `cancel`, `pause`, `resume`, `run_now` and their `RowAction`s, `refusal`,
  `pk_of`.

This package re-exports the names the rest of the app uses (and, for the admin,
`TICK_COUNTS` of `notifications.outcomes`); a test that patches a value
a function reads (`PURGE_BATCH`) patches it in the module that defines it.
"""

from __future__ import annotations

from notifications.conf import Policy
from notifications.outcomes import TICK_COUNTS
from notifications.services.actions import REQUEUE, ActionResult, RowAction, act, purge, requeue
from notifications.services.creating import edit, prepare, schedule_notification, start
from notifications.services.enqueueing import Prepared, save_batch, schedule_many
from notifications.services.lifecycle import PAUSE, RESUME, RUN_NOW, cancel, pause, pk_of, refusal, resume, run_now

__all__ = [
    "PAUSE",
    "REQUEUE",
    "RESUME",
    "RUN_NOW",
    "TICK_COUNTS",
    "ActionResult",
    "Policy",
    "Prepared",
    "RowAction",
    "act",
    "cancel",
    "edit",
    "pause",
    "pk_of",
    "prepare",
    "purge",
    "refusal",
    "requeue",
    "resume",
    "run_now",
    "save_batch",
    "schedule_many",
    "schedule_notification",
    "start",
]
