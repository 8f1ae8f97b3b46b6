"""How the queue is doing, for operators: the admin header, `notifications_status`, checks.

- `queue`: counts per state, the last ticks, what is stale or misconfigured.
- `flow`: open circuits and targets at their rate limit.
- `clock`: how far this host's clock is from the database's.
"""
