"""OpenTelemetry's gauges of the queue: rows per state, the lag, open circuits.

Observable gauges, read from the database (`notifications.health.monitoring`, four
queries, at most once a second for all three) when the SDK collects. A long-running
process registers them once, e.g. a web worker in its `AppConfig.ready()`:

    from notifications.health.telemetry import instrument

    instrument()

The spans, counters and tick histogram are `notifications.otel`'s, recorded by the
tick itself; a no-op without opentelemetry-api, as these are.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from notifications import otel
from notifications.health import monitoring

GAUGE_CACHE = 1.0  # seconds: one collection reads the database once for every gauge

_cache: dict[str, Any] = {}

Values = list[tuple[float, dict[str, str]]]


def _snapshot() -> monitoring.Snapshot:
    now = time.monotonic()
    if "snapshot" not in _cache or _cache["at"] + GAUGE_CACHE <= now:
        _cache["snapshot"] = monitoring.read()
        _cache["at"] = now
    snapshot: monitoring.Snapshot = _cache["snapshot"]
    return snapshot


def _observe(read: Callable[[monitoring.Snapshot], Values]) -> Callable[[Any], Iterable[Any]]:
    from opentelemetry.metrics import Observation

    def callback(options: Any) -> Iterable[Any]:
        try:
            values = read(_snapshot())
        except Exception:  # noqa: BLE001 - a collection must not break on a database error
            return []
        return [Observation(value, attributes) for value, attributes in values]

    return callback


def instrument() -> bool:
    """Register the gauges with the meter provider (once; later calls do nothing); False
    without opentelemetry."""
    meter = otel.meter()
    if meter is None:
        return False
    if not otel.claim_gauges():
        return True
    _cache.clear()
    meter.create_observable_gauge(
        "notifications.rows",
        callbacks=[_observe(lambda s: [(n, {"notifications.state": state}) for state, n in s.rows.items()])],
        unit="{row}",
        description="Rows per state (the admin's states).",
    )
    meter.create_observable_gauge(
        "notifications.oldest_due.age",
        callbacks=[_observe(lambda s: [(s.oldest_due_seconds, {})])],
        unit="s",
        description="Age of the oldest due, unsent row (0 when none).",
    )
    meter.create_observable_gauge(
        "notifications.open_circuits",
        callbacks=[_observe(lambda s: [(s.open_circuits, {})])],
        unit="{target}",
        description="Targets whose circuit is open or half-open.",
    )
    return True
