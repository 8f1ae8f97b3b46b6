"""The retry policy: error_count -> Retry(delay) or DeadLetter, per the README's defaults (pure, table-tested)."""

from __future__ import annotations

import pytest

from notifications.conf import Defaults
from notifications.rules.retry import DeadLetter, Retry, after_failure

SEED_BACKOFF = (60, 300, 1800)


def test_defaults_are_the_seed_design():
    assert Defaults.MAX_RETRIES == 3
    assert tuple(Defaults.BACKOFF) == SEED_BACKOFF


@pytest.mark.parametrize(
    ("error_count", "max_retries", "backoff", "expected"),
    [
        # Defaults: tried at t, t+60 s, t+360 s, then dead-lettered.
        (0, 3, SEED_BACKOFF, Retry(delay=60, error_count=1)),
        (1, 3, SEED_BACKOFF, Retry(delay=300, error_count=2)),
        (2, 3, SEED_BACKOFF, DeadLetter(error_count=3)),
        # The 30-minute step is only reached when MAX_RETRIES is raised ...
        (2, 4, SEED_BACKOFF, Retry(delay=1800, error_count=3)),
        (3, 4, SEED_BACKOFF, DeadLetter(error_count=4)),
        # ... and past the end of the list the last step repeats.
        (3, 6, SEED_BACKOFF, Retry(delay=1800, error_count=4)),
        (4, 6, SEED_BACKOFF, Retry(delay=1800, error_count=5)),
        (5, 6, SEED_BACKOFF, DeadLetter(error_count=6)),
        # One attempt only.
        (0, 1, SEED_BACKOFF, DeadLetter(error_count=1)),
        # No backoff at all: nothing to wait for, so nothing to retry.
        (0, 3, (), DeadLetter(error_count=3)),
        # A custom single-step backoff.
        (0, 3, (15,), Retry(delay=15, error_count=1)),
        (1, 3, (15,), Retry(delay=15, error_count=2)),
    ],
)
def test_after_failure(error_count, max_retries, backoff, expected):
    assert after_failure(error_count, max_retries, backoff) == expected


@pytest.mark.parametrize(
    ("error_count", "retry_after", "delay"),
    [
        (0, 120, 120),  # the receiver asks for longer than the step: honoured
        (0, 10, 60),  # shorter than the step: the backoff still applies
        (1, 120, 300),
        (1, 900, 900),
        (0, 1800, 1800),  # exactly the last step
        (0, 86_400, 1800),  # capped at the last backoff step, never beyond
        (0, 0, 60),
        (0, None, 60),
    ],
)
def test_retry_after_stretches_the_wait_up_to_the_last_step(error_count, retry_after, delay):
    decision = after_failure(error_count, 4, SEED_BACKOFF, retry_after=retry_after)
    assert decision == Retry(delay=delay, error_count=error_count + 1)


def test_retry_after_does_not_postpone_the_dead_letter():
    assert after_failure(2, 3, SEED_BACKOFF, retry_after=120) == DeadLetter(error_count=3)


def test_failure_timeline_with_defaults():
    """Walk the default policy: attempts at t, t+60, t+360, then the dead letter."""
    at, count, attempts = 0.0, 0, [0.0]
    while True:
        decision = after_failure(count, 3, SEED_BACKOFF)
        if isinstance(decision, DeadLetter):
            break
        at += decision.delay
        count = decision.error_count
        attempts.append(at)
    assert attempts == [0, 60, 360]
    assert decision.error_count == 3
