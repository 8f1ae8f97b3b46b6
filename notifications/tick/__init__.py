"""One tick: claim due rows, deliver them in parallel, write the outcomes back.

- `engine`: the tick itself (`run_tick`, `Tick`): settings, its pipeline, housekeeping, record.
- `report`: what a tick did (`TickReport`).
- `pipeline`: one run: claims, holds, flow control, handing rows to the workers, collecting.
- `dispatch`: claimed rows on their way to a worker: batches, jobs, a queue per target.
- `workers`: the worker threads' side: deliver one row's channels under their deadline and
  settle its outcome (`notifications.outcomes`). It imports nothing that reaches the database.
- `announce`: the public signals of the outcomes a write-back stored.

Every statement the tick runs it asks of `notifications.store` (claims, digests, the
write-back, housekeeping).
"""
