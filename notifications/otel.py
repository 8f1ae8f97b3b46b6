"""OpenTelemetry: a span per delivery, delivery counters, tick durations and queue gauges.

Through `opentelemetry-api` alone (`pip install "django-notification-queue[opentelemetry]"`);
the site brings the SDK and its exporters and sets the global providers as it does for
the rest of its code. Without the package everything here is a no-op, and with the API
but no SDK configured the API's own no-op objects cost a few microseconds per delivery.

- **Spans**: one per channel send, named `send <target>` (kind PRODUCER), following the
  messaging semantic conventions: `messaging.system` = `notifications`,
  `messaging.operation.name` / `.type` = `send`, `messaging.destination.name` = the
  target (a webhook's host and port, or `email`), `messaging.message.id` = the firing's
  id (the webhook-id); on failure the status is ERROR with the channel's error and
  `error.type` is the HTTP status, else the error class (`transient`, `permanent`).
- **Counters**: `notifications.deliveries` by `notifications.channel`,
  `messaging.destination.name` and `notifications.outcome` (as the Prometheus metric).
- **Histogram**: `notifications.tick.duration` (seconds).
- **Gauges** (observable, read from the database when the SDK collects): registered by
  `notifications.health.telemetry.instrument()`, which a long-running process calls.

A leaf of the app (the channels and the tick use it): it imports nothing of the app.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

try:
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import trace as otel_trace
except ImportError:  # optional: everything below is a no-op
    otel_metrics = None  # type: ignore[assignment]
    otel_trace = None  # type: ignore[assignment]

SCOPE = "notifications"
SYSTEM = "notifications"

_lock = threading.Lock()
_overrides: dict[str, Any] = {}
_instruments: dict[str, Any] = {}
gauges_registered = False


def enabled() -> bool:
    """Whether opentelemetry-api is installed."""
    return otel_trace is not None


def configure(*, tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Use these providers instead of the global ones (tests; sites that keep their own).
    Instruments are made afresh for them."""
    global gauges_registered
    with _lock:
        _overrides.clear()
        if tracer_provider is not None:
            _overrides["tracer_provider"] = tracer_provider
        if meter_provider is not None:
            _overrides["meter_provider"] = meter_provider
        _instruments.clear()
        gauges_registered = False


def _tracer() -> Any:
    """The app's tracer; None without opentelemetry, or while no provider is set (the API's
    proxy would hand out no-op spans: skipping them spares each delivery their cost)."""
    if otel_trace is None:
        return None
    if "tracer_provider" not in _overrides and isinstance(
        otel_trace.get_tracer_provider(), otel_trace.ProxyTracerProvider
    ):
        return None
    tracer = _instruments.get("tracer")
    if tracer is None and otel_trace is not None:
        with _lock:
            tracer = otel_trace.get_tracer(SCOPE, tracer_provider=_overrides.get("tracer_provider"))
            _instruments["tracer"] = tracer
    return tracer


def meter() -> Any:
    """The app's meter (None without opentelemetry)."""
    return _meter()


def _meter() -> Any:
    meter = _instruments.get("meter")
    if meter is None and otel_metrics is not None:
        meter = otel_metrics.get_meter(SCOPE, meter_provider=_overrides.get("meter_provider"))
        _instruments["meter"] = meter
    return meter


def _instrument(name: str, make: str, **kwargs: Any) -> Any:
    found = _instruments.get(name)
    if found is None:
        meter = _meter()
        if meter is None:
            return None
        with _lock:
            found = _instruments.get(name)
            if found is None:
                found = getattr(meter, make)(name, **kwargs)
                _instruments[name] = found
    return found


# --- spans ------------------------------------------------------------------------------------


class NoSpan:
    """What a delivery span is without opentelemetry: nothing."""

    def finish(self, *, error: str | None, error_type: str) -> None:
        pass

    def end(self) -> None:
        pass


_NO_SPAN = NoSpan()


class Delivery:
    """The span of one send; `finish` records its result."""

    def __init__(self, span: Any) -> None:
        self.span = span

    def finish(self, *, error: str | None, error_type: str) -> None:
        """The send's result: `error` None when it went out; else why, and its
        `error.type` (the HTTP status, else the error class)."""
        span = self.span
        if error is None or not span.is_recording():
            return
        span.set_attribute("error.type", error_type)
        if error:
            span.set_attribute("notifications.error", error)
        span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, error))

    def end(self) -> None:
        self.span.end()


DeliverySpan = Delivery | NoSpan


def _delivery_span(channel: str, target: str, message_id: str, notification_id: int) -> Any:
    tracer = _tracer()
    if tracer is None:
        return None
    span = tracer.start_span(
        f"send {target}",
        kind=otel_trace.SpanKind.PRODUCER,
        record_exception=False,
        set_status_on_exception=False,
    )
    if span.is_recording():
        span.set_attributes(
            {
                "messaging.system": SYSTEM,
                "messaging.operation.name": "send",
                "messaging.operation.type": "send",
                "messaging.destination.name": target,
                "messaging.message.id": message_id,
                "notifications.channel": channel,
                "notifications.notification.id": notification_id,
            }
        )
    return span


@contextmanager
def delivery(channel: str, *, target: str, message_id: str, notification_id: int) -> Iterator[DeliverySpan]:
    """A span around one channel's send of a firing to `target`, current while it runs (so
    what the send traces nests in it); a no-op without opentelemetry."""
    span = _delivery_span(channel, target, message_id, notification_id)
    if span is None:
        yield _NO_SPAN
        return
    with otel_trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
        yield Delivery(span)


def delivery_started(channel: str, *, target: str, message_id: str, notification_id: int) -> DeliverySpan:
    """The span of one send started now and ended by its `end` (in whichever thread the send
    ends: it is never the current span); a no-op without opentelemetry."""
    span = _delivery_span(channel, target, message_id, notification_id)
    return _NO_SPAN if span is None else Delivery(span)


# --- counters and the tick histogram --------------------------------------------------------


def count_deliveries(counts: Mapping[tuple[str, str, str], int]) -> None:
    """Add a write-back's delivery counts (`notifications.store.writeback.delivery_counts`)."""
    if not counts or otel_metrics is None:
        return
    counter = _instrument(
        "notifications.deliveries", "create_counter", unit="{delivery}", description="Deliveries by outcome."
    )
    for (channel, target, outcome), count in counts.items():
        counter.add(
            count,
            {"notifications.channel": channel, "messaging.destination.name": target, "notifications.outcome": outcome},
        )


def tick_duration(seconds: float, claimed: int) -> None:
    """Record one tick's duration."""
    if otel_metrics is None:
        return
    histogram = _instrument(
        "notifications.tick.duration", "create_histogram", unit="s", description="How long each tick took."
    )
    histogram.record(max(seconds, 0.0), {"notifications.claimed": "some" if claimed else "none"})


def claim_gauges() -> bool:
    """True once per configuration: the caller registers the gauges."""
    global gauges_registered
    with _lock:
        if gauges_registered:
            return False
        gauges_registered = True
        return True
