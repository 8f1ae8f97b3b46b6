"""One tick: claim due rows, deliver them in parallel, write the outcomes back.

- `engine`: the tick itself (`run_tick`, `Tick`, `TickReport`).
- `dispatch`: claimed rows on their way to a worker: batches, jobs, a queue per target.
- `workers`: the worker threads' side: deliver one row's channels under their deadline.
  It imports nothing that reaches the database.
"""
