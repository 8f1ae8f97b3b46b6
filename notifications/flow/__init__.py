"""Flow control between claim and send: targets, circuit breakers and rate limits.

- `targets`: the one definition of a row's targets (a webhook host, or `email`).
- `breaker`: a circuit breaker per target, kept in `notifications.models.Target`.
- `ratelimit`: token buckets per target, shared through the database.
- `control`: both, applied to a tick's claimed rows.
- `pruning`: idle Target and RateBucket rows deleted at the end of each tick.
"""
