"""Observability end to end: a stack of real service processes, each with its /metrics port and its
traces exported over OTLP/HTTP to a collector stand-in run here (it decodes the protobuf export
requests with opentelemetry-proto, as a collector would).

* a recall through the real MCP client moves the right counters: the gateway's MCP and bus
  histograms, the memory service's handler histogram and its embedder's, by exactly one request;
* the consumers' lag is sampled into gauges and `engram status` shows lag and dead letters;
* one trace id (the client's W3C traceparent) spans gateway → memory → extractor for a daily log
  saved over MCP. Waits are bounded polls; nothing is timed.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import secrets
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from prometheus_client.parser import text_string_to_metric_families

from contracts.subjects import Names
from deploy.stack import Stack, StackOptions
from kit.bus import Bus

pytestmark = pytest.mark.e2e


@dataclass
class Collector:
    """An OTLP/HTTP trace receiver: every span it was sent, as (trace id hex, service name, span name)."""

    port: int = 0
    spans: list[tuple[str, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def of_trace(self, trace_id: str) -> list[tuple[str, str]]:
        with self.lock:
            return [(service, name) for tid, service, name in self.spans if tid == trace_id]


def run_collector() -> tuple[Collector, ThreadingHTTPServer]:
    collector = Collector()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            found = []
            for resource_spans in request.resource_spans:
                service = next((a.value.string_value for a in resource_spans.resource.attributes
                                if a.key == "service.name"), "?")
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        found.append((span.trace_id.hex(), service, span.name))
            with collector.lock:
                collector.spans.extend(found)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    collector.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return collector, server


@dataclass
class Observed:
    stack: Stack
    key: str
    collector: Collector
    namespace: str


@pytest.fixture(scope="module")
def observed(infra) -> Iterator[Observed]:  # type: ignore[no-untyped-def]
    collector, server = run_collector()
    namespace = infra.fresh_namespace()
    options = StackOptions(
        home=infra.root / "metrics-home", nats_url=infra.nats_url, database_url=infra.database_url,
        namespace=namespace, gateway_port=0, auth_port=0, metrics=True,
        extra_env={"ENGRAM_RATE_LIMIT_PER_MINUTE": "100000", "ENGRAM_RATE_LIMIT_BURST": "10000",
                   "ENGRAM_MEMORY_SCHEMA": f"mem_{namespace}", "ENGRAM_AUTH_SCHEMA": f"auth_{namespace}",
                   "ENGRAM_EXTRACTOR_SCHEMA": f"ext_{namespace}", "ENGRAM_GRAPH_SCHEMA": f"graph_{namespace}",
                   "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.port}",
                   "OTEL_BSP_SCHEDULE_DELAY": "200"},
    )
    stack = Stack(options, say=lambda _: None)
    try:
        stack.start()
        key = stack.create_key(None, "observer")["key"]
        yield Observed(stack, key, collector, namespace)
    finally:
        stack.stop()
        server.shutdown()
        asyncio.run(_drop_streams(infra.nats_url, namespace))


async def _drop_streams(nats_url: str, namespace: str) -> None:
    bus = await Bus.connect(nats_url, Names(namespace), name="engram-test-cleanup")
    try:
        await bus.delete_streams()
    finally:
        await bus.close()


@asynccontextmanager
async def session(o: Observed, traceparent: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {o.key}"}
    if traceparent:
        headers["traceparent"] = traceparent
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=60.0))
    async with http, Client(streamable_http_client(o.stack.gateway_url + "/mcp", http_client=http)) as client:
        yield client


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a /metrics page, keyed by (name, labels)."""
    text = httpx.get(url, timeout=10).text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    """The sum over every sample of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


async def test_a_recall_moves_the_gateway_and_memory_counters(observed: Observed) -> None:
    gateway = observed.stack.gateway_url + "/metrics"
    memory = f"http://127.0.0.1:{observed.stack.metrics_ports['memory']}/metrics"
    project = "metrics-" + uuid.uuid4().hex[:6]
    async with session(observed) as client:
        saved = await client.call_tool("save_memory", {"category": "preference", "content": "Drinks green tea",
                                                       "containerTag": project})
        assert not saved.is_error, saved.content
        before_gw, before_mem = scrape(gateway), scrape(memory)
        found = await client.call_tool("recall", {"query": "What does the user drink?", "containerTag": project})
        assert not found.is_error and "green tea" in json.dumps([c.model_dump() for c in found.content])
    after_gw, after_mem = scrape(gateway), scrape(memory)

    def moved(before: Any, after: Any, name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    # the gateway: one MCP tools/call of `recall`, answered 200, and one recall query to the memory service
    assert moved(before_gw, after_gw, "engram_mcp_request_duration_seconds_count", tool="recall", status="200") == 1
    assert moved(before_gw, after_gw, "engram_bus_request_duration_seconds_count",
                 service="memory", operation="recall", kind="query", outcome="ok") == 1
    assert moved(before_gw, after_gw, "engram_http_request_duration_seconds_count",
                 route="/mcp", method="POST", status="200") >= 1
    # the memory service: one recall handled, and the query embedded (the embedder's histogram)
    assert moved(before_mem, after_mem, "engram_handler_duration_seconds_count",
                 service="memory", kind="query", operation="recall", outcome="ok") == 1
    assert moved(before_mem, after_mem, "engram_handler_duration_seconds_count",
                 service="memory", kind="command", operation="save_memory", outcome="ok") == 0
    assert total(after_mem, "engram_embed_duration_seconds_count") > total(before_mem, "engram_embed_duration_seconds_count")
    # the save before it was a command the memory consumer acknowledged
    assert value(after_mem, "engram_consumer_messages_total", durable="memory-commands", result="ack") >= 1


async def test_lag_and_dead_letters_are_sampled_and_shown_by_status(observed: Observed) -> None:
    memory = f"http://127.0.0.1:{observed.stack.metrics_ports['memory']}/metrics"
    extractor = f"http://127.0.0.1:{observed.stack.metrics_ports['extractor']}/metrics"
    stream = Names(observed.namespace).commands_stream
    samples: dict[Any, float] = {}
    pending = ("engram_consumer_pending", frozenset({("stream", stream), ("durable", "memory-commands")}))
    dead = ("engram_dead_letter_messages", frozenset({("durable", "memory-commands")}))
    for _ in range(150):  # the sampler runs every 5 s: a bounded wait for its first round, both of its
        samples = scrape(memory)  # steps (the lag is set before the dead letters are counted)
        if pending in samples and dead in samples:
            break
        await asyncio.sleep(0.1)
    assert value(samples, "engram_consumer_pending", stream=stream, durable="memory-commands") == 0
    assert dead in samples
    ext: dict[Any, float] = {}
    for _ in range(200):
        ext = scrape(extractor)
        if any(n == "engram_extraction_tasks" for n, _ in ext):
            break
        await asyncio.sleep(0.1)
    assert any(n == "engram_extraction_tasks" for n, _ in ext)

    env = {**os.environ, "ENGRAM_HOME": str(observed.stack.o.home), "ENGRAM_NAMESPACE": observed.namespace,
           "ENGRAM_NATS_URL": observed.stack.nats_url, "ENGRAM_DATABASE_URL": observed.stack.database_url,
           "ENGRAM_EXTRACTOR_SCHEMA": f"ext_{observed.namespace}", "COLUMNS": "200"}
    shown = subprocess.run([sys.executable, "-m", "deploy", "status"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "dead letters" in shown.stdout and "lag (pending)" in shown.stdout
    assert "memory-commands" in shown.stdout
    assert "memory-dailylog-projector" in shown.stdout  # every durable consumer of the streams, not a fixed list
    assert f":{observed.stack.metrics_ports['memory']}/metrics" in shown.stdout


async def test_one_trace_spans_gateway_memory_and_extractor(observed: Observed) -> None:
    trace_id = secrets.token_hex(16)
    traceparent = f"00-{trace_id}-{secrets.token_hex(8)}-01"
    project = "traced-" + uuid.uuid4().hex[:6]
    async with session(observed, traceparent) as client:
        saved = await client.call_tool("save_daily_log", {
            "log_date": "2025-04-12", "containerTag": project,
            "turns": [{"speaker": "user", "text": "I moved to Valparaiso last week."}],
        })
        assert not saved.is_error, saved.content
    def extractor_handled(spans: list[tuple[str, str]]) -> bool:  # its consumer span ends once the log is done
        return any(service == "engram-extractor" and name.endswith(" handle") for service, name in spans)

    services: set[str] = set()
    for _ in range(600):  # bounded: the extractor handles the log's event, then spans are exported in batches
        found = observed.collector.of_trace(trace_id)
        services = {service for service, _ in found}
        if {"engram-gateway", "engram-memory", "engram-extractor"} <= services and extractor_handled(found):
            break
        await asyncio.sleep(0.1)
    spans = observed.collector.of_trace(trace_id)
    assert {"engram-gateway", "engram-memory", "engram-extractor"} <= services, spans
    names = {name for _, name in spans}
    assert "POST /mcp" in names                       # the gateway's request
    assert "send memory.save_daily_log" in names      # its command on the bus
    assert "memory-commands handle" in names          # handled by the memory service
    # the log's event, handled by the extractor's consumer, which claims the log from the memory service
    assert extractor_handled(spans), spans
    assert any(service == "engram-extractor" and name == "send memory.claim_daily_log" for service, name in spans)
