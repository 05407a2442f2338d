"""OpenTelemetry traces across the bus: one request followed from the gateway into every service.

W3C trace context (``traceparent``) travels in the NATS headers of commands, queries and events
(:mod:`kit.bus` injects it where it sends and continues it where it handles), so a save reaches the
memory service, its ``DailyLogSaved`` event the extractor, and the extractor's own commands the
memory service again, all in the gateway request's trace.

Spans are exported only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set: then :func:`setup` installs the SDK's tracer
provider with a batch processor and the OTLP/HTTP (protobuf) exporter, which read the standard
``OTEL_*`` variables themselves (headers, timeouts, ``OTEL_BSP_SCHEDULE_DELAY``…). Otherwise the
API's no-op tracer is left in place: no span is recorded and no header is added.
"""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

log = logging.getLogger("engram.tracing")

tracer = trace.get_tracer("engram")

_configured = False


def enabled_by_environment() -> bool:
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def setup(service: str) -> bool:
    """Install the exporting tracer provider when an OTLP endpoint is configured; returns whether
    spans are exported. Called once by each service at start (later calls do nothing)."""
    global _configured
    if _configured or not enabled_by_environment():
        return _configured
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({
        SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME") or f"engram-{service}",
        SERVICE_INSTANCE_ID: f"{os.uname().nodename}-{os.getpid()}",
    })
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)  # flush what is still queued when the service stops
    _configured = True
    log.info("traces exported over OTLP/HTTP to %s as %s", os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
             or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"), resource.attributes[SERVICE_NAME])
    return True


def inject(headers: dict[str, str]) -> dict[str, str]:
    """Add the current trace context (``traceparent``) to outgoing message headers; returns them."""
    propagate.inject(headers)
    return headers


@contextmanager
def span(name: str, *, kind: SpanKind = SpanKind.INTERNAL, headers: Mapping[str, str] | None = None,
         attributes: dict[str, Any] | None = None) -> Iterator[Span]:
    """A span around the block, continuing the trace found in ``headers`` when given (a message
    received); an exception marks it as an error and propagates."""
    context = propagate.extract(dict(headers)) if headers else None
    with tracer.start_as_current_span(name, context=context, kind=kind, attributes=attributes,
                                      record_exception=True, set_status_on_exception=True) as current:
        yield current


def mark_error(current: Span, description: str) -> None:
    """An answered failure (a refusal, not an exception) on the current span."""
    if current.is_recording():
        current.set_status(Status(StatusCode.ERROR, description))


__all__ = ["SpanKind", "enabled_by_environment", "inject", "mark_error", "setup", "span", "tracer"]
