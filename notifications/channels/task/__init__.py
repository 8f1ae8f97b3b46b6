"""The `task` channel: a row of the queue that runs a `django.tasks` task (Django 6.0+).

`notifications.tasks.QueueBackend.enqueue` inserts a `TaskRun` (what to run) and a row with
channels `["task"]` that points at it; the tick claims that row like any other and this
channel "delivers" it by running the task (`running`), so the claim, leases, budget,
concurrency, retries, backoff, dead letters, requeue and purge are the queue's own and
the core names no task.

- `channel`: `TaskChannel`, the sender (runs the task with a database connection of its
  own, closed after) and its rules (a row's `channel_data["task"]` names its `TaskRun`).
- `running`: one attempt of one task, its record and Django's task signals.
- `results`: a `TaskRun` (and its row) as Django's `TaskResult`.
- `deadline`: how long a task may run (`OPTIONS["TIMEOUT"]`), the channel's own deadline.
- `retention`: finished results pruned after `OPTIONS["RESULT_RETENTION_DAYS"]`.
"""
