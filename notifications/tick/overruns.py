"""Sends left running past their deadline, in this process: their rows stay claimed.

The monitor reports a row whose send overran its deadline as timed out, and its outcome is
written back; but the send may still be running (a thread cannot be stopped). Its row keeps
its claim (`Outcome.still_sending`), which every tick of this process renews while the send
runs (`runtick --loop` ticks again before the lease could end) and hands back once it
returned: a retry never runs beside the first run. A process that ends takes its sends
with it; their claims end with the lease.

Process-wide, not the tick's: a send outlives the tick that left it behind. Nothing here
reaches the database (the tick asks the store).
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol


class Sending(Protocol):
    """A row whose send was left behind (`notifications.tick.dispatch.Job`)."""

    def sending(self) -> bool: ...


@dataclass(eq=False)
class Overrun:
    pk: Any
    token: uuid.UUID
    job: Sending
    renewed: float  # monotonic time its claim was last made or renewed


# A claim a tick still holds is renewed once this share of the lease has gone: rows still
# being sent (a channel whose deadline is longer than the lease), still waiting for a worker,
# or left running past their deadline are never claimed by another tick meanwhile.
RENEW_AFTER = 0.5

_lock = threading.Lock()
_left: list[Overrun] = []


def leave(pk: Any, token: uuid.UUID, job: Sending) -> None:
    """Row `pk`'s claim (`token`) was kept at its write-back, its send still running."""
    with _lock:
        _left.append(Overrun(pk, token, job, time.monotonic()))


def pending() -> bool:
    with _lock:
        return bool(_left)


def renewal_due(lease: float) -> float | None:
    """The monotonic time by which a tick of this process must run to renew the claims of
    sends still running (`runtick --loop` ticks by then); None when there are none."""
    with _lock:
        oldest = min((o.renewed for o in _left), default=None)
    return None if oldest is None else oldest + lease * RENEW_AFTER


def sweep(renew_after: float) -> tuple[list[Overrun], list[Overrun]]:
    """The overruns whose claim was last renewed `renew_after` seconds ago or more and whose
    send still runs (to renew, marked renewed now), and those whose send returned (to hand
    back, forgotten here)."""
    now = time.monotonic()
    with _lock:
        returned = [o for o in _left if not o.job.sending()]
        running = [o for o in _left if o not in returned]
        _left[:] = running
        due = [o for o in running if now - o.renewed >= renew_after]
        for overrun in due:
            overrun.renewed = now
    return due, returned


def put_back(overruns: list[Overrun]) -> None:
    """Overruns the tick could not hand back (the database failed): tried again at the next sweep."""
    with _lock:
        _left.extend(overruns)


__all__ = ["RENEW_AFTER", "Overrun", "leave", "pending", "put_back", "renewal_due", "sweep"]
