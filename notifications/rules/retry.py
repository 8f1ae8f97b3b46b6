"""What a full failure leads to: another attempt later, or the dead letters. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Retry:
    """Try the firing again after `delay` seconds; `error_count` becomes `error_count`."""

    delay: float
    error_count: int


@dataclass(frozen=True)
class DeadLetter:
    """Retries are spent: the firing is dead-lettered with `error_count` attempts."""

    error_count: int


def after_failure(
    error_count: int,
    max_retries: int,
    backoff: Sequence[float],
    *,
    retry_after: float | None = None,
) -> Retry | DeadLetter:
    """Decide a full failure of a row that had failed `error_count` times in a row.

    The n-th failure waits `backoff[n-1]` (the last step repeats); the failure that
    brings the count to `max_retries` dead-letters instead. A receiver's
    `retry_after` can stretch the wait up to the last backoff step, never beyond.
    """
    failures = error_count + 1
    if failures >= max_retries or not backoff:
        return DeadLetter(error_count=max(failures, max_retries))
    delay = float(backoff[min(error_count, len(backoff) - 1)])
    if retry_after is not None:
        delay = max(delay, min(float(retry_after), float(backoff[-1])))
    return Retry(delay=delay, error_count=failures)
