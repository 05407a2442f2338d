"""Two replicas of every service in one run (`engram up --replicas 2`, here through the same Stack):
correct results, work spread across replicas (each replica's own counters, scraped from its
/metrics port), nothing applied twice, and a replica killed with SIGKILL → the other carries on.

The gateways (and auth's OAuth servers) share one port with SO_REUSEPORT, so the kernel spreads the
clients' connections; commands are spread by JetStream across the replicas' pulls on one durable
consumer, queries by the NATS queue group. The memory service's two replicas share a Qdrant server
when ENGRAM_TEST_QDRANT_URL names one; otherwise each keeps its own embedded vector shard, following
the event log (services/memory/application/index_follow.py), and recall through either finds what
was saved through the other. Waits are bounded polls; nothing is timed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from prometheus_client.parser import text_string_to_metric_families

from contracts.subjects import Names
from deploy.stack import Stack, StackOptions
from kit.bus import Bus

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(sys.platform != "linux", reason="SO_REUSEPORT, process handling")]

QDRANT_URL = os.environ.get("ENGRAM_TEST_QDRANT_URL")


@dataclass
class Replicated:
    stack: Stack
    key: str
    namespace: str
    ids: dict[str, set[str]] = field(default_factory=dict)  # project -> its memories' ids, once settled


@pytest.fixture(scope="module")
def replicated(infra) -> Iterator[Replicated]:  # type: ignore[no-untyped-def]
    namespace = infra.fresh_namespace()
    extra = {"ENGRAM_RATE_LIMIT_PER_MINUTE": "100000", "ENGRAM_RATE_LIMIT_BURST": "10000",
             "ENGRAM_MEMORY_SCHEMA": f"mem_{namespace}", "ENGRAM_AUTH_SCHEMA": f"auth_{namespace}",
             "ENGRAM_EXTRACTOR_SCHEMA": f"ext_{namespace}", "ENGRAM_GRAPH_SCHEMA": f"graph_{namespace}", "ENGRAM_EXTRACTOR_ACK_WAIT_S": "10"}
    if QDRANT_URL:
        extra.update(ENGRAM_QDRANT_URL=QDRANT_URL, ENGRAM_QDRANT_COLLECTION=f"engram_{namespace}")
    options = StackOptions(home=infra.root / "replicas-home", nats_url=infra.nats_url, database_url=infra.database_url,
                           namespace=namespace, gateway_port=0, auth_port=0, replicas=2, extra_env=extra)
    stack = Stack(options, say=lambda _: None)
    try:
        stack.start()
        key = stack.create_key(None, "replicas", scopes=["memory:read", "memory:write", "memory:maintenance"])
        yield Replicated(stack, key["key"], namespace)
    finally:
        stack.stop()
        asyncio.run(_drop_streams(infra.nats_url, namespace))


async def _drop_streams(nats_url: str, namespace: str) -> None:
    bus = await Bus.connect(nats_url, Names(namespace), name="engram-test-cleanup")
    try:
        await bus.delete_streams()
    finally:
        await bus.close()


@asynccontextmanager
async def session(r: Replicated) -> AsyncIterator[Client]:
    # a connection of its own per session, so the kernel may give each to either gateway
    headers = {"Authorization": f"Bearer {r.key}", "X-Engram-Toolsets": "assistant,maintenance"}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=60.0),
                              limits=httpx2.Limits(max_keepalive_connections=0))
    async with http, Client(streamable_http_client(r.stack.gateway_url + "/mcp", http_client=http)) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None, result.content
    return result.structured_content  # type: ignore[no-any-return]


def counter(r: Replicated, process: str, name: str, **labels: str) -> float:
    """The sum of ``name`` samples with ``labels`` on one process's /metrics."""
    text = httpx.get(f"http://127.0.0.1:{r.stack.metrics_ports[process]}/metrics", timeout=10).text
    want = set(labels.items())
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == name and want <= set(s.labels.items()))


def processes(r: Replicated, service: str) -> list[str]:
    return [name for name, proc in r.stack.services.items() if proc.service == service]


async def save_and_log(r: Replicated, project: str, n: int) -> None:
    """``n`` memories and ``n`` daily logs, each over its own MCP session (connections spread)."""

    async def one(i: int) -> None:
        async with session(r) as client:
            saved = await client.call_tool("memory", {"content": f"Replica fact {project} number {i}",
                                                      "containerTag": project})
            assert not saved.is_error, saved.content
            await call(client, "save_daily_log", log_date="2025-05-01", containerTag=project,
                       turns=[{"speaker": "user", "text": f"Log {i} of {project}: I moved to Valparaiso last week."}])

    gate = asyncio.Semaphore(8)

    async def bounded(i: int) -> None:
        async with gate:
            await one(i)

    await asyncio.gather(*(bounded(i) for i in range(n)))


async def graph_memories(r: Replicated, project: str, memory_ids: set[str]) -> list[str]:
    """The memory nodes of the project's graph once it holds ``memory_ids`` (bounded wait: the graph
    service's replicas project the events after the memory service)."""
    nodes: list[str] = []
    async with session(r) as client:
        for _ in range(300):
            view = await client.call_tool("memory-graph", {"containerTag": project, "limit": 1000})
            assert not view.is_error, view.content
            nodes = [n["id"] for n in view.structured_content["nodes"] if n["type"] == "memory"]
            if set(nodes) >= memory_ids:
                break
            await asyncio.sleep(0.2)
    return nodes


async def settled(r: Replicated, project: str) -> list[str]:
    """The project's memories once every daily log of it was extracted (bounded wait)."""
    async with session(r) as client:
        for _ in range(600):
            waiting = (await call(client, "get_unprocessed_logs", limit=100, containerTag=project))["logs"]
            if not waiting:
                break
            await asyncio.sleep(0.2)
        assert not waiting, waiting
        listed = (await call(client, "recall_memory", limit=100, containerTag=project))["memories"]
    r.ids[project] = {str(m["id"]) for m in listed}
    return [m["content"] for m in listed]


async def test_every_service_runs_twice_and_work_is_spread(replicated: Replicated) -> None:
    r = replicated
    for service in ("gateway", "auth", "memory", "extractor", "graph"):
        assert len(processes(r, service)) == 2, r.stack.services
    project = "rep-" + uuid.uuid4().hex[:6]
    n = 24
    await save_and_log(r, project, n)
    contents = await settled(r, project)
    saved = [c for c in contents if c.startswith("Replica fact")]
    assert len(saved) == n and len(set(saved)) == n, contents  # each save exactly once
    assert len(contents) == len(set(contents)), contents  # nothing extracted twice either
    # the graph service's two replicas share its projector: each memory is one node, projected once
    nodes = await graph_memories(r, project, r.ids[project])
    assert sorted(nodes) == sorted(r.ids[project]), (nodes, r.ids[project])

    # per-replica counters: both gateways served MCP requests, both extractors handled log events
    for service, name, labels in (
        ("gateway", "engram_mcp_request_duration_seconds_count", {"tool": "memory"}),
        ("extractor", "engram_consumer_messages_total", {"result": "ack"}),
        ("graph", "engram_consumer_messages_total", {"durable": "graph-projector", "result": "ack"}),
    ):
        handled = {p: counter(r, p, name, **labels) for p in processes(r, service)}
        assert all(v > 0 for v in handled.values()), (service, handled)
        print(f"\n{service}: {handled}")
    commands = {p: counter(r, p, "engram_consumer_messages_total", durable="memory-commands", result="ack")
                for p in processes(r, "memory")}
    assert sum(commands.values()) >= 2 * n and all(v > 0 for v in commands.values()), commands
    print(f"memory commands: {commands}")

    # recall through either memory replica finds every save, whichever replica took its command
    found = await recalled(r, project, n)
    assert found == set(range(n)), found
    recalls = {p: counter(r, p, "engram_handler_duration_seconds_count", kind="query", operation="recall")
               for p in processes(r, "memory")}
    assert all(v > 0 for v in recalls.values()), recalls
    print(f"memory recalls: {recalls}")
    if not QDRANT_URL:  # each replica followed the log into its own shard
        follows = {p: counter(r, p, "engram_consumer_messages_total", durable=f"memory-index-{i}", result="ack")
                   for i, p in enumerate(processes(r, "memory"), start=1)}
        assert all(v >= n for v in follows.values()), follows
        print(f"memory index followers: {follows}")


async def recalled(r: Replicated, project: str, n: int) -> set[int]:
    """The numbers of the project's saved facts that recall finds, each asked on its own session
    (spread over both gateways and, by the queue group, both memory replicas); a bounded wait for
    the replica that did not take a save to follow it into its index."""
    found: set[int] = set()
    for _ in range(100):
        for i in sorted(set(range(n)) - found):
            async with session(r) as client:
                result = await client.call_tool("recall", {"query": f"Replica fact {project} number {i}",
                                                           "containerTag": project, "limit": 3,
                                                           "includeProfile": False})
                assert not result.is_error, result.content
                text = "\n".join(getattr(c, "text", "") for c in result.content)
                if f") Replica fact {project} number {i} — " in text:  # a hit line: "[1] (score) content — project"
                    found.add(i)
        if found == set(range(n)):
            break
        await asyncio.sleep(0.2)
    return found


def test_auth_commands_are_spread_and_a_killed_replica_leaves_the_other_serving(replicated: Replicated) -> None:
    r = replicated
    for i in range(12):  # API keys: commands of the auth service, pulled by both replicas
        r.stack.create_key(None, f"spread-{i}")
    spread = {p: counter(r, p, "engram_handler_duration_seconds_count", kind="command", operation="create_api_key")
              for p in processes(r, "auth")}
    assert all(v > 0 for v in spread.values()), spread
    print(f"\nauth create_api_key: {spread}")

    # SIGKILL the second replica of every service that has one; the first carries on alone
    killed = [name for name in r.stack.services if name.endswith("-2")]
    for name in killed:
        os.kill(r.stack.services[name].pid, signal.SIGKILL)
    for name in killed:
        r.stack.services[name].proc.wait(10)
    before = {p: counter(r, p, "engram_consumer_messages_total", durable="extractor-logs", result="ack")
              for p in ("extractor",)}
    project = "after-kill-" + uuid.uuid4().hex[:6]
    n = 8

    async def writes() -> list[str]:
        await save_and_log(r, project, n)
        return await settled(r, project)

    contents = asyncio.run(writes())
    saved = [c for c in contents if c.startswith("Replica fact")]
    assert len(saved) == n and len(contents) == len(set(contents)), contents
    assert asyncio.run(recalled(r, project, n)) == set(range(n))  # the surviving memory replica recalls them
    # A log event the killed replica's still-open pull request took reaches the survivor only after the
    # consumer's ack wait (the log itself was already extracted by a claim): wait for it, bounded.
    acked = counter(r, "extractor", "engram_consumer_messages_total", durable="extractor-logs", result="ack")
    for _ in range(400):  # 0.5 s polls: a bound past the extractor's 120 s ack wait, only to end a hang
        if acked >= before["extractor"] + n:
            break
        time.sleep(0.5)
        acked = counter(r, "extractor", "engram_consumer_messages_total", durable="extractor-logs", result="ack")
    assert acked >= before["extractor"] + n
    key = r.stack.create_key(None, "after-kill")  # auth's commands, now all on the first replica
    assert key["key"].startswith("egm_")
