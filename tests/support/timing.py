"""The one bound for tests that guard against unbounded work (a hang, a walk that grows
without limit, a wait out of a long interval): generous, never a timing.

A loaded machine (load 15 on two cores) makes bounded work several times slower; the
guard must still pass there. Speed targets are the benchmark's (`bench/`, `make bench`),
which prints figures instead of failing.
"""

from __future__ import annotations

# Seconds: far above what the bounded work takes on a loaded shared machine, far below
# what the unbounded work these tests guard against would take (forever, or minutes).
GUARD_SECONDS = 60.0
