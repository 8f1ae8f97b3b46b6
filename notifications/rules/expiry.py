"""When a firing comes too late to be sent: `expires_at` and `max_delay`. Pure.

`expires_at` is an instant after which no firing of the row is sent. `max_delay` (seconds)
bounds how late a firing may go out after the time it was due (`firing_due_at`, or
`next_fire_at` when the firing has not waited): its retries, and the time it waited behind
an open circuit, a rate limit or a held setting, all count; quiet hours make the window's
end its due time, and an operator's requeue, run now or resume make it due afresh. It
guards against sending after an outage or a backlog what no longer matters (a
password-reset mail two hours late); `expires_at` is the absolute deadline.

The reasons returned are what follows `expired: ` in the row's `last_error`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

PREFIX = "expired: "  # how `last_error` of an expired firing begins

# Units for durations in reasons, largest first: (seconds, name).
_UNITS = ((86_400, "d"), (3_600, "h"), (60, "min"), (1, "s"))


def describe(span: timedelta | float) -> str:
    """A duration as people read it: `45 s`, `1.5 min`, `2 h`, `3 d`."""
    seconds = span.total_seconds() if isinstance(span, timedelta) else float(span)
    for size, unit in _UNITS:
        if seconds >= size or size == 1:
            return f"{round(seconds / size, 1):g} {unit}"
    raise AssertionError("unreachable")  # the last unit always matches


def too_late(
    now: datetime, *, due_at: datetime | None, expires_at: datetime | None, max_delay: int | None
) -> str | None:
    """Why a firing due at `due_at` must not go out at `now`, or None when it may."""
    if expires_at is not None and now > expires_at:
        return f"{describe(now - expires_at)} past expires_at"
    if max_delay and due_at is not None and (now - due_at).total_seconds() > max_delay:
        return f"{describe(now - due_at)} after its due time, max_delay {describe(max_delay)}"
    return None


def past_deadline(at: datetime, expires_at: datetime | None) -> timedelta | None:
    """How far `at` (a retry, a quiet window's end) lies past `expires_at`; None if it does not."""
    if expires_at is None or at <= expires_at:
        return None
    return at - expires_at
