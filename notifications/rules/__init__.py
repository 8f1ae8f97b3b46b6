"""Pure rules: no ORM, no I/O, no settings read; each a function of its arguments.

- `schedule`: the next occurrence of a cron expression or RRULE in a time zone.
- `quiet`: quiet-hours windows on a row's wall clock.
- `expiry`: when a firing comes too late to be sent (`expires_at`, `max_delay`).
- `retry`: what a full failure leads to: another attempt later, or the dead letters.
- `secrets`, `signing`: Standard Webhooks secrets (`whsec_...`) and signatures.
- `network`: which literal addresses a webhook may never reach.
"""
