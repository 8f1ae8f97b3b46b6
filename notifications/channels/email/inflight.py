"""The attachment bytes a tick's workers hold at once: a process-wide budget.

An attachment is read whole from storage and the message that carries it is built and
written out in memory (base64 and the SMTP line endings come on top), so each send holds
several times its attachments' size. Forty workers each sending a 10 MiB attachment peaked
at 1.74 GB. Before reading a row's attachments a worker takes their size from this budget
(`NOTIFICATIONS_ATTACHMENT_BYTES_IN_FLIGHT`, 32 MiB by default) and gives it back once the
message is sent; rows whose attachments do not fit wait for their turn, within the
channel's deadline. A row larger than the whole budget waits until nothing else is held,
then goes alone. Rows without attachments never wait.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from notifications import compat
from notifications.conf import positive_int


class ByteBudget:
    """At most `limit` bytes held at once by the threads that take them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.taken = 0
        self._changed = threading.Condition()

    def take(self, size: int, timeout: float) -> int | None:
        """Wait until `size` bytes (at most the whole budget) fit, take them and return how
        many were taken; None when they did not fit within `timeout` seconds."""
        wanted = max(0, min(size, self.limit))
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.taken + wanted > self.limit:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(left)
            self.taken += wanted
        return wanted

    def give_back(self, taken: int) -> None:
        with self._changed:
            self.taken -= taken
            self._changed.notify_all()

    @contextlib.contextmanager
    def holding(self, size: int, timeout: float) -> Iterator[bool]:
        """`size` bytes held for the block; yields False (holding nothing) when they did not
        fit within `timeout` seconds."""
        taken = self.take(size, timeout)
        try:
            yield taken is not None
        finally:
            if taken is not None:
                self.give_back(taken)


_budgets: dict[int, ByteBudget] = {}
_lock = threading.Lock()


def budget() -> ByteBudget:
    """This process's budget for NOTIFICATIONS_ATTACHMENT_BYTES_IN_FLIGHT as set now.

    The first call also has glibc give large buffers back once freed
    (`compat.map_large_buffers`): otherwise worker threads keep what their sends held, and
    a tick's memory grows with its concurrency whatever the budget."""
    compat.map_large_buffers()
    limit = positive_int("ATTACHMENT_BYTES_IN_FLIGHT")
    with _lock:
        return _budgets.setdefault(limit, ByteBudget(limit))
