"""How long one task may run: the `task` channel's deadline, its own rather than
NOTIFICATIONS_CHANNEL_TIMEOUT (a task is a job, not a request to a server).

`TASKS[alias]["OPTIONS"]["TIMEOUT"]` in seconds (default ten minutes); with several aliases
naming the backend, the longest (one channel runs the tasks of all). The tick's workers give
a task this long before it is reported timed out, and its row's claim is renewed meanwhile.
"""

from __future__ import annotations

import math
from typing import Any

from notifications.channels.task.retention import configured

DEFAULT_TIMEOUT = 600.0  # seconds: ten minutes
MAX_TIMEOUT = 86_400.0  # seconds: a day, as the longest tick budget


def timeout_of(options: Any) -> float:
    """An alias's OPTIONS["TIMEOUT"], its default where it is not a usable number (E071 says why)."""
    value = options.get("TIMEOUT", DEFAULT_TIMEOUT) if isinstance(options, dict) else None
    usable = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if usable and value is not None and 0 < value <= MAX_TIMEOUT else DEFAULT_TIMEOUT


def deadline() -> float | None:
    """The longest TIMEOUT of the aliases naming the backend; None when none does."""
    timeouts = [timeout_of(options) for options in configured().values()]
    return max(timeouts) if timeouts else None


__all__ = ["DEFAULT_TIMEOUT", "MAX_TIMEOUT", "deadline", "timeout_of"]
