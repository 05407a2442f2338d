"""Prometheus metrics of every service, with the standard client library (``prometheus_client``).

The metrics are declared here once, so every service exports the same names (docs/observability.md
lists them, deploy/grafana/engram.json draws them):

* ``engram_http_request_duration_seconds{route,method,status}`` and
  ``engram_mcp_request_duration_seconds{tool,status}`` — the gateway's requests, by route template
  and by MCP tool (or JSON-RPC method);
* ``engram_bus_request_duration_seconds{service,operation,kind,outcome}`` — a caller's command or
  query to a service over the bus (the gateway's and the extractor's view);
* ``engram_handler_duration_seconds{service,kind,operation,outcome}`` — a service handling one
  command or query (``kit.service.ServiceRuntime``), recall included;
* ``engram_consumer_messages_total{durable,result}`` and ``engram_dead_letters_total{durable}`` —
  what this replica's durable consumers did (ack / retry / dead-letter): per replica, so two
  replicas show how the work was spread;
* ``engram_consumer_pending``, ``engram_consumer_ack_pending``, ``engram_consumer_redelivered``
  ``{stream,durable}`` and ``engram_dead_letter_messages{durable}`` — the consumers' lag and the
  dead-letter stream, sampled from JetStream (:func:`sample_bus`);
* ``engram_extraction_tasks{state}`` (the extractor), ``engram_embed_duration_seconds{model}`` and
  ``engram_embedded_texts_total{model}`` (the memory service's embedder, :class:`TimedEmbedder`).

Services that are not HTTP servers serve ``/metrics`` on a port of their own
(``ENGRAM_<SERVICE>_METRICS_PORT``, 0 or unset = off; ``ENGRAM_METRICS_HOST``, default 127.0.0.1),
started with :func:`start`; the gateway serves ``/metrics`` on its own port too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)

if TYPE_CHECKING:
    from kit.bus.streams import Streams  # what the sampler reads of the bus: consumers, their state

log = logging.getLogger("engram.metrics")

#: request and handler latencies: 1 ms .. 30 s
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

HTTP_REQUEST_SECONDS = Histogram(
    "engram_http_request_duration_seconds", "Gateway HTTP requests by route template, method and status",
    ["route", "method", "status"], buckets=LATENCY_BUCKETS,
)
MCP_REQUEST_SECONDS = Histogram(
    "engram_mcp_request_duration_seconds", "Gateway MCP requests by tool (or JSON-RPC method) and HTTP status",
    ["tool", "status"], buckets=LATENCY_BUCKETS,
)
BUS_REQUEST_SECONDS = Histogram(
    "engram_bus_request_duration_seconds", "Commands and queries sent over the bus, by target service and operation",
    ["service", "operation", "kind", "outcome"], buckets=LATENCY_BUCKETS,
)
HANDLER_SECONDS = Histogram(
    "engram_handler_duration_seconds", "Commands and queries handled by this service, by operation and outcome",
    ["service", "kind", "operation", "outcome"], buckets=LATENCY_BUCKETS,
)
QUERIES_SHED = Counter(
    "engram_queries_shed_total", "Queries dropped unanswered because their caller's deadline passed while queued",
    ["service", "operation"],
)
CONSUMER_MESSAGES = Counter(
    "engram_consumer_messages_total", "Messages this replica's durable consumers handled (ack, retry, dead)",
    ["durable", "result"],
)
DEAD_LETTERS = Counter(
    "engram_dead_letters_total", "Messages this replica sent to the dead-letter stream", ["durable"],
)
CONSUMER_PENDING = Gauge(
    "engram_consumer_pending", "Messages not yet delivered to the durable consumer (lag)", ["stream", "durable"],
)
CONSUMER_ACK_PENDING = Gauge(
    "engram_consumer_ack_pending", "Messages delivered but not yet acknowledged", ["stream", "durable"],
)
CONSUMER_REDELIVERED = Gauge(
    "engram_consumer_redelivered", "Messages delivered more than once and not yet acknowledged", ["stream", "durable"],
)
DEAD_LETTER_MESSAGES = Gauge(
    "engram_dead_letter_messages", "Messages kept in the dead-letter stream, by the consumer that gave up on them",
    ["durable"],
)
EXTRACTION_TASKS = Gauge("engram_extraction_tasks", "Extraction tasks by state (the extractor's ledger)", ["state"])
EMBED_SECONDS = Histogram(
    "engram_embed_duration_seconds", "Time spent in one embedder call (a batch or a query)", ["model"],
    buckets=LATENCY_BUCKETS,
)
EMBEDDED_TEXTS = Counter("engram_embedded_texts_total", "Texts the embedder embedded", ["model"])
VECTOR_SEGMENTS = Gauge("engram_vector_index_segments",
                        "Segments of the embedded vector shard (each searched on its own), sampled every second")
VECTOR_COMPACTIONS = Counter("engram_vector_index_compactions_total",
                             "Compactions of the embedded vector shard, by result (done, failed)", ["result"])


class _EmbeddingCacheCollector:
    """``engram_embedding_cache_total{result=hit|miss}``, read at scrape time from the memory
    service's cache object (its ``hits`` / ``misses`` counts; :func:`track_embedding_cache`)."""

    def __init__(self) -> None:
        self.cache: Any = None

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily("engram_embedding_cache", "Embedding cache lookups of texts and token rows, "
                                     "by result (hit: not embedded again)", labels=["result"])
        if self.cache is not None:
            family.add_metric(["hit"], float(getattr(self.cache, "hits", 0)))
            family.add_metric(["miss"], float(getattr(self.cache, "misses", 0)))
        yield family


EMBEDDING_CACHE = _EmbeddingCacheCollector()
REGISTRY.register(EMBEDDING_CACHE)  # type: ignore[arg-type]


def track_embedding_cache(cache: Any) -> None:
    """Export the hits and misses of this embedding cache (an object with ``hits`` and ``misses``)."""
    EMBEDDING_CACHE.cache = cache

SAMPLE_EVERY_S = 5.0


@contextmanager
def timed(histogram: Histogram, labels: Callable[[], dict[str, str]] | dict[str, str]) -> Iterator[None]:
    """Observe the block's duration; ``labels`` may be a function read at the end (an outcome)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        chosen = labels() if callable(labels) else labels
        histogram.labels(**chosen).observe(time.perf_counter() - started)


def metrics_port(service: str) -> int:
    """``ENGRAM_<SERVICE>_METRICS_PORT`` (0 when unset: no metrics server)."""
    raw = os.environ.get(f"ENGRAM_{service.upper()}_METRICS_PORT", "").strip()
    if not raw:
        return 0
    try:
        port = int(raw)
    except ValueError as exc:
        raise SystemExit(f"ENGRAM_{service.upper()}_METRICS_PORT={raw!r} is not a port number (0 = off)") from exc
    if not 0 <= port <= 65535:
        raise SystemExit(f"ENGRAM_{service.upper()}_METRICS_PORT={port} is outside 0..65535 (0 = off)")
    return port


def serve(service: str, port: int | None = None, host: str | None = None) -> int:
    """Serve ``/metrics`` on ``port`` (the service's ``<service>_metrics_port`` setting; read from
    ``ENGRAM_<SERVICE>_METRICS_PORT`` when not given) on ``host`` (``ENGRAM_METRICS_HOST``), in a
    thread of prometheus_client's; returns the port, 0 when off."""
    port = metrics_port(service) if port is None else port
    if port:
        host = host or os.environ.get("ENGRAM_METRICS_HOST", "127.0.0.1")
        start_http_server(port, addr=host)
        log.info("%s metrics at http://%s:%d/metrics", service, host, port)
    return port


def exposition() -> tuple[bytes, str]:
    """The text exposition of this process's metrics and its content type (for an HTTP route)."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


async def sample_bus(bus: Streams, stop: asyncio.Event, every_s: float = SAMPLE_EVERY_S) -> None:
    """Sample the lag of the consumers this process runs, and the dead-letter stream, until stop."""
    from nats.js.errors import NotFoundError

    while not stop.is_set():
        for spec in list(bus.consuming.values()):
            try:
                state = await bus.consumer_state(spec.stream, spec.durable)
            except Exception as exc:  # noqa: BLE001 - a sample is skipped, never fatal
                log.debug("lag of %s not sampled: %s", spec.durable, exc)
                continue
            if state is not None:
                CONSUMER_PENDING.labels(spec.stream, spec.durable).set(state.pending)
                CONSUMER_ACK_PENDING.labels(spec.stream, spec.durable).set(state.ack_pending)
                CONSUMER_REDELIVERED.labels(spec.stream, spec.durable).set(state.redelivered)
        if bus.consuming:
            try:
                counts = await bus.dead_letter_counts()
            except (NotFoundError, Exception) as exc:  # noqa: BLE001
                log.debug("dead letters not sampled: %s", exc)
            else:
                for spec in bus.consuming.values():
                    DEAD_LETTER_MESSAGES.labels(spec.durable).set(counts.get(spec.durable, 0))
        try:
            await asyncio.wait_for(stop.wait(), timeout=every_s)
        except TimeoutError:
            pass


async def sample_every(stop: asyncio.Event, every_s: float, step: Callable[[], Awaitable[None]], what: str) -> None:
    """Run ``step`` now and every ``every_s`` seconds until stop (a failed sample is logged at debug)."""
    while not stop.is_set():
        try:
            await step()
        except Exception as exc:  # noqa: BLE001 - a sample is skipped, never fatal
            log.debug("%s not sampled: %s", what, exc)
        try:
            await asyncio.wait_for(stop.wait(), timeout=every_s)
        except TimeoutError:
            pass


def start(service: str, bus: Streams, stop: asyncio.Event, *, port: int | None = None,
          host: str | None = None) -> list[asyncio.Task[None]]:
    """A service's metrics: its ``/metrics`` port (when configured) and the lag sampler."""
    serve(service, port, host)
    return [asyncio.create_task(sample_bus(bus, stop))]


def set_extraction_tasks(counts: dict[str, int]) -> None:
    for state in {"running", "done", "failed", *counts}:
        EXTRACTION_TASKS.labels(state).set(counts.get(state, 0))


class TimedEmbedder:
    """An embedder whose ``embed`` calls are timed and counted (every other attribute passes through)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        model = str(getattr(inner, "model_id", type(inner).__name__))
        self._seconds = EMBED_SECONDS.labels(model)
        self._texts = EMBEDDED_TEXTS.labels(model)

    def embed(self, texts: Sequence[str]) -> Any:
        started = time.perf_counter()
        try:
            return self._inner.embed(texts)
        finally:
            self._seconds.observe(time.perf_counter() - started)
            self._texts.inc(len(texts))

    def embed_query(self, text: str) -> Any:
        started = time.perf_counter()
        try:
            query = getattr(self._inner, "embed_query", None)
            return query(text) if query is not None else self._inner.embed([text])[0]
        finally:
            self._seconds.observe(time.perf_counter() - started)
            self._texts.inc()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


#: JSON-RPC methods of MCP kept as their own label (anything else is "other": bounded cardinality)
MCP_METHODS = frozenset({
    "initialize", "notifications/initialized", "ping", "tools/list", "resources/list", "resources/read",
    "resources/templates/list", "prompts/list", "prompts/get", "completion/complete", "logging/setLevel",
})
_MCP_BODY_MAX = 1 << 20


class HttpMetricsMiddleware:
    """ASGI middleware of an HTTP service: each request timed by route template, method and status
    (``engram_http_request_duration_seconds``), MCP requests also by tool
    (``engram_mcp_request_duration_seconds``, the tool read from the JSON-RPC body as the app
    reads it, so nothing is buffered), and a server span continuing the caller's ``traceparent``.
    Put it outermost, so refusals of the other middlewares (401, 413, 429) are counted too."""

    def __init__(self, app: Any, *, mcp_paths: tuple[str, ...] = ("/mcp", "/"), tools: frozenset[str] = frozenset(),
                 routes: Callable[[], Sequence[Any]] | None = None) -> None:
        self.app = app
        self.mcp_paths = mcp_paths  # where MCP is POSTed (the gateway also takes it at its root)
        self.tools = tools
        self.routes = routes  # the app's routes, to name a request's route template (bounded cardinality)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from kit import tracing

        status = 500
        is_mcp = scope.get("path") in self.mcp_paths and scope.get("method") == "POST"
        body: list[bytes] = []
        size = 0

        async def receiving() -> Any:
            nonlocal size
            message = await receive()
            if message.get("type") == "http.request" and size <= _MCP_BODY_MAX:
                chunk = message.get("body", b"")
                size += len(chunk)
                body.append(chunk)
            return message

        async def sending(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or []
                   if k in (b"traceparent", b"tracestate")}
        method = str(scope.get("method", "GET"))
        started = time.perf_counter()
        with tracing.span(method, kind=tracing.SpanKind.SERVER, headers=headers,
                          attributes={"http.request.method": method}) as current:
            try:
                await self.app(scope, receiving if is_mcp else receive, sending)
            finally:
                elapsed = time.perf_counter() - started
                route = self._route(scope)
                HTTP_REQUEST_SECONDS.labels(route, method, str(status)).observe(elapsed)
                if is_mcp:
                    tool = self._tool(b"".join(body)) if size <= _MCP_BODY_MAX else "other"
                    MCP_REQUEST_SECONDS.labels(tool, str(status)).observe(elapsed)
                    if current.is_recording():
                        current.set_attribute("engram.mcp.tool", tool)
                if current.is_recording():
                    current.update_name(f"{method} {route}")
                    current.set_attribute("http.route", route)
                    current.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        tracing.mark_error(current, str(status))

    def _route(self, scope: dict[str, Any]) -> str:
        found = getattr(scope.get("route"), "path", None)
        if found:
            return str(found)
        if self.routes is not None:
            from starlette.routing import Match

            for route in self.routes():
                if route.matches(scope)[0] is Match.FULL:
                    return str(getattr(route, "path", "unmatched"))
        return "unmatched"

    def _tool(self, raw: bytes) -> str:
        """The tool a JSON-RPC request calls (or its method); "other" for anything unknown, a batch, or
        a body that cannot be read (not JSON, or nested deeper than the parser goes: RecursionError).
        A label never fails the request it describes."""
        import json

        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):
            return "other"
        if not isinstance(doc, dict):
            return "other"
        method = doc.get("method")
        if method == "tools/call":
            name = (doc.get("params") or {}).get("name") if isinstance(doc.get("params"), dict) else None
            return name if name in self.tools else "other"
        return method if method in MCP_METHODS else "other"
