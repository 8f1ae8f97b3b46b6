"""OpenTelemetry through the real SDK: spans read from its InMemorySpanExporter, metrics from
its InMemoryMetricReader. Without a provider configured the API's no-ops are used."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from notifications import otel as app_otel
from notifications.api import run_tick, schedule
from notifications.health.telemetry import instrument
from notifications.models import Target
from tests.support.servers import Reply

pytestmark = pytest.mark.django_db


@pytest.fixture
def otel():
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    app_otel.configure(tracer_provider=tracer_provider, meter_provider=meter_provider)
    yield exporter, reader
    app_otel.configure()
    meter_provider.shutdown()


def points(reader) -> dict[str, list]:
    """metric name -> its data points."""
    found: dict[str, list] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


@pytest.fixture
def fired(otel, webhook_server):
    """An email delivered and a webhook answered 503, one row each."""
    webhook_server.reply = Reply(status=503)
    schedule(channels=["email"], email_to="ada@example.com", subject="s", body="b")
    hook = schedule(channels=["webhook"], webhook_url=webhook_server.url("/hook?token=secret"))
    run_tick()
    return otel, webhook_server, hook


def test_a_span_per_delivery_with_the_messaging_conventions(fired):
    (exporter, _), server, hook = fired
    spans = {span.attributes["notifications.channel"]: span for span in exporter.get_finished_spans()}

    assert set(spans) == {"email", "webhook"}
    target = f"127.0.0.1:{server.port}"
    webhook = spans["webhook"]
    assert webhook.name == f"send {target}"
    assert webhook.kind == SpanKind.PRODUCER
    assert webhook.attributes["messaging.system"] == "notifications"
    assert webhook.attributes["messaging.operation.name"] == "send"
    assert webhook.attributes["messaging.operation.type"] == "send"
    assert webhook.attributes["messaging.destination.name"] == target
    assert webhook.attributes["messaging.message.id"] == str(hook.firing_id)
    assert webhook.attributes["error.type"] == "503"
    assert webhook.status.status_code == StatusCode.ERROR
    assert webhook.status.description == "webhook: HTTP 503"
    assert "secret" not in str(dict(webhook.attributes))

    email = spans["email"]
    assert email.name == "send email"
    assert email.attributes["messaging.destination.name"] == "email"
    assert "error.type" not in email.attributes
    assert email.status.status_code == StatusCode.UNSET


def test_delivery_counters_by_channel_target_and_outcome(fired):
    (_, reader), server, _ = fired

    counted = {
        (
            p.attributes["notifications.channel"],
            p.attributes["messaging.destination.name"],
            p.attributes["notifications.outcome"],
        ): p.value
        for p in points(reader)["notifications.deliveries"]
    }

    assert counted == {("email", "email", "delivered"): 1, ("webhook", f"127.0.0.1:{server.port}", "failed"): 1}


def test_tick_duration_histogram(fired):
    (_, reader), _, _ = fired
    run_tick()  # nothing due

    histogram = {p.attributes["notifications.claimed"]: p for p in points(reader)["notifications.tick.duration"]}

    assert histogram["some"].count == 1 and histogram["none"].count == 1
    assert histogram["some"].sum > 0


def test_gauges_rows_lag_and_open_circuits(otel):
    _, reader = otel
    due = timezone.now() - timedelta(minutes=2)
    schedule(channels=["email"], email_to="ada@example.com", subject="s", body="b", fire_at=due)
    Target.objects.create(key="hooks.example.com", state=Target.State.OPEN)
    assert instrument()

    found = points(reader)

    rows = {p.attributes["notifications.state"]: p.value for p in found["notifications.rows"]}
    assert rows["due"] == 1 and rows["dead"] == 0
    (lag,) = found["notifications.oldest_due.age"]
    assert 119 <= lag.value < 180
    (circuits,) = found["notifications.open_circuits"]
    assert circuits.value == 1


def test_without_a_configured_provider_nothing_is_recorded(webhook_server):
    app_otel.configure()  # the global providers: the API's no-ops in this test process
    schedule(channels=["email"], email_to="ada@example.com", subject="s", body="b")

    assert run_tick().counts()["succeeded"] == 1
