"""The fault suite's harness: a supervised stack of real processes, clients that ingest through the
real gateway and retry with the same idempotency key, and the checks that compare the event log,
Postgres and the vector index with what the clients were told.

Only processes this suite started are killed: every stack has its own embedded Postgres (and its
own NATS, or a three-node cluster the test starts) in a temporary home.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from nats.js import api

from contracts.subjects import Names
from deploy.stack import Stack, StackOptions
from deploy.supervisor import RUNNING, RestartPolicy
from kit.bus import Bus

BOUND_S = 90.0  # generous upper bounds only (a loaded 2-core machine); figures are recorded
#: figures of each trial are appended here as JSON lines (read before a stack replaces the environment)
RESULTS_OUT = os.environ.get("ENGRAM_FAULTS_OUT")


@dataclass
class Write:
    key: str
    content: str
    first_sent: float
    acked_at: float | None = None
    sent_at: float = 0.0
    status: int | None = None
    attempts: int = 0


@dataclass
class Writer:
    """One client saving memories over REST in a loop, each retried with the same Idempotency-Key
    (on a refused connection, a timeout, a 5xx, 409 in flight or 429) with backoff."""

    base_url: str
    key: str
    marker: str
    stop: threading.Event = field(default_factory=threading.Event)
    writes: list[Write] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(base_url=self.base_url, headers=headers, timeout=20) as client:
            n = 0
            while not self.stop.is_set():
                n += 1
                write = Write(key=str(uuid.uuid4()), content=f"{self.marker} note {n} {uuid.uuid4().hex[:8]}",
                              first_sent=time.time())
                self.writes.append(write)
                delay = 0.2
                while write.acked_at is None:
                    write.attempts += 1
                    write.sent_at = time.time()
                    try:
                        r = client.post("/v1/memories", json={"content": write.content},
                                        headers={"Idempotency-Key": write.key})
                    except httpx.HTTPError:
                        r = None
                    if r is not None and r.status_code in (200, 201, 202):
                        write.acked_at, write.status = time.time(), r.status_code
                        break
                    if r is not None and r.status_code not in (409, 429) and r.status_code < 500:
                        self.errors.append(f"{r.status_code} {r.text[:300]}")  # a client error: a bug
                        self.writes.remove(write)
                        return
                    if time.time() - write.first_sent > 2 * BOUND_S:
                        self.errors.append(f"gave up on {write.content!r} after {write.attempts} attempts")
                        return
                    time.sleep(delay)
                    delay = min(2.0, delay * 2)
                time.sleep(0.02)

    def acked(self) -> list[Write]:
        return [w for w in list(self.writes) if w.acked_at is not None]


def fault_stack(home: Path, *, nats_url: str | None = None, extra_env: dict[str, str] | None = None) -> Stack:
    """A started, supervised stack in ``home`` (embedded Postgres; embedded NATS unless ``nats_url``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    options = StackOptions(
        home=home, gateway_port=0, auth_port=0, nats_url=nats_url,
        extra_env={"ENGRAM_LOG_LEVEL": "INFO", "ENGRAM_RATE_LIMIT_PER_MINUTE": "100000",
                   "ENGRAM_RATE_LIMIT_BURST": "10000", "ENGRAM_ANONYMOUS_RATE_LIMIT_PER_MINUTE": "100000",
                   "ENGRAM_EXTRACTOR_ACK_WAIT_S": "10", **(extra_env or {})},
        restart_policy=RestartPolicy(initial_delay_s=0.2, max_delay_s=2.0, crash_loop_restarts=50),
    )
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # the services must not see the harness's ENGRAM_TEST_* / ENGRAM_* settings
    stack = Stack(options, say=lambda line: print(line, flush=True))
    try:
        stack.start(timeout=300)
    except BaseException:
        os.environ.clear()
        os.environ.update(saved)
        stack.stop()
        raise
    stack.saved_environ = saved  # type: ignore[attr-defined]
    stack.supervise_in_background(0.1)
    return stack


def stop_stack(stack: Stack) -> None:
    saved = getattr(stack, "saved_environ", None)
    try:
        stack.stop()
    finally:
        if saved is not None:
            os.environ.clear()
            os.environ.update(saved)


def wait_back(stack: Stack, name: str, restarts_before: int, deadline: float) -> float:
    """When the supervisor had ``name`` running again after a kill."""
    sup = stack.supervised[name]
    while time.time() < deadline:
        if sup.state == RUNNING and sup.restarts > restarts_before and sup.started_at:
            return float(sup.started_at)
        time.sleep(0.05)
    raise AssertionError(f"the {name} was not restarted within {BOUND_S:.0f} s: {sup.to_json()}")


@dataclass
class Ingest:
    """What the clients were told during one fault: their writes, and when the fault hit and ended."""

    marker: str
    writes: list[Write]
    fault_at: float
    back_at: float

    @property
    def first_write_s(self) -> float:
        after = [w.acked_at for w in self.writes if w.acked_at is not None and w.sent_at >= self.fault_at]
        return (min(after) - self.fault_at) if after else float("nan")

    @property
    def longest_wait_s(self) -> float:
        return max(w.acked_at - w.first_sent for w in self.writes if w.acked_at is not None)


def ingest_through(stack: Stack, api_key: str, marker: str, fault: Callable[[], float], *, clients: int = 2,
                   before: int = 4, after: int = 3) -> Ingest:
    """Clients save memories; once ``before`` writes are acknowledged ``fault()`` runs (it returns
    when the faulty part was back); ``after`` more acknowledged writes sent after that end it."""
    writers = [Writer(stack.gateway_url, api_key, f"{marker} c{i}") for i in range(clients)]
    threads = [threading.Thread(target=w.run, daemon=True) for w in writers]
    for t in threads:
        t.start()
    try:
        deadline = time.time() + BOUND_S
        while sum(len(w.acked()) for w in writers) < before:
            assert time.time() < deadline, "no write succeeded before the fault"
            assert not any(w.errors for w in writers), [w.errors for w in writers]
            time.sleep(0.05)
        fault_at = time.time()
        back_at = fault()
        deadline = time.time() + BOUND_S
        while sum(1 for w in writers for x in w.acked() if x.sent_at > back_at) < after:
            assert time.time() < deadline, "writes did not resume after the fault"
            assert not any(w.errors for w in writers), [w.errors for w in writers]
            time.sleep(0.05)
    finally:
        for w in writers:
            w.stop.set()
        for t in threads:
            t.join(timeout=2 * BOUND_S)
    assert not any(t.is_alive() for t in threads), "a client is stuck"
    assert not any(w.errors for w in writers), [w.errors for w in writers]
    return Ingest(marker, [x for w in writers for x in w.acked()], fault_at, back_at)


# what the clients were told against what is stored -------------------------------------------------
@dataclass
class Ledger:
    """Per content the clients were told was saved: rows in Postgres, creations in the event log."""

    expected: list[str]
    rows: dict[str, int]
    created: dict[str, int]

    @property
    def lost(self) -> list[str]:
        return [c for c in self.expected if self.rows.get(c, 0) == 0 or self.created.get(c, 0) == 0]

    @property
    def duplicated(self) -> list[str]:
        return [c for c in self.expected if self.rows.get(c, 0) > 1 or self.created.get(c, 0) > 1]


async def _memory_events(stack: Stack, tenant: str) -> list[dict[str, Any]]:
    """Every memory event of ``tenant`` in the event log, oldest first (an ephemeral consumer)."""
    names = Names(stack.o.namespace)
    bus = await Bus.connect(stack.nats_url, names, name="faults-ledger")
    try:
        sub = await bus.js.pull_subscribe(
            f"{names.namespace}.evt.{tenant}.memory.>", stream=names.events_stream,
            config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL, ack_policy=api.AckPolicy.NONE,
                                      inactive_threshold=60.0),
        )
        total = (await sub.consumer_info()).num_pending or 0
        out: list[dict[str, Any]] = []
        while len(out) < total:
            msgs = await sub.fetch(min(256, total - len(out)), timeout=10.0)
            out += [json.loads(m.data) for m in msgs]
        await sub.unsubscribe()
        return out
    finally:
        await bus.close()


async def _rows(stack: Stack, marker: str) -> dict[str, int]:
    conn = await asyncpg.connect(stack.database_url)
    try:
        found = await conn.fetch("SELECT content FROM memory.memories WHERE status = 'active' AND content LIKE $1",
                                 marker + "%")
    finally:
        await conn.close()
    counts: dict[str, int] = {}
    for r in found:
        counts[r["content"]] = counts.get(r["content"], 0) + 1
    return counts


def ledger(stack: Stack, tenant: str, ingest: Ingest) -> Ledger:
    """Compare what the clients were told with Postgres and the event log (waiting a while for
    queued writes to be applied)."""
    expected = sorted(w.content for w in ingest.writes)
    deadline = time.time() + BOUND_S
    while True:
        rows = asyncio.run(_rows(stack, ingest.marker))
        if all(c in rows for c in expected) or time.time() > deadline:
            break
        time.sleep(0.5)
    created: dict[str, int] = {}
    for event in asyncio.run(_memory_events(stack, tenant)):
        data = event.get("data") or {}
        content = data.get("content", "")
        if content.startswith(ingest.marker) and data.get("version") == 1:
            created[content] = created.get(content, 0) + 1
    return Ledger(expected, rows, created)


# read models against a replay -------------------------------------------------------------------
@contextmanager
def memory_service_stopped(stack: Stack) -> Iterator[None]:
    """Stop the memory service (on purpose: the supervisor leaves it), then start it again."""
    child = stack.services["memory"]
    child.stop()
    try:
        yield
    finally:
        with stack._lock:
            child.restart()
            stack.supervised["memory"].started(time.time(), child.pid)


def replay_matches(stack: Stack, tenant: str) -> dict[str, Any]:
    """With the memory service stopped: the read model's digest and the vector index's count of
    the tenant's active memories, before and after `engram replay memory`'s rebuild, and what the
    rebuild did to the index (``points``: written / kept / swept — every point the faults left is
    checked against its memory's latest event by fingerprint)."""
    from services.memory.adapters.pg_store import MemoryStore
    from services.memory.config import MemorySettings
    from services.memory.main import memory_app
    from services.memory.replay import ensure_service_stopped, rebuild
    from services.memory.search.ports import SearchFilter

    settings = MemorySettings(home=stack.o.home, nats_url=stack.nats_url, database_url=stack.database_url,
                              namespace=stack.o.namespace)

    async def state(store: MemoryStore, index: Any) -> tuple[str, int, int]:
        digest = await store.pool.fetchval(
            f"SELECT md5(string_agg(id::text || version || status || content_hash || coalesce(md5(late_tokens), ''), "
            f"',' ORDER BY id)) FROM {store.s}.memories")
        active = await store.pool.fetchval(
            f"SELECT count(*) FROM {store.s}.memories WHERE tenant = $1 AND status = 'active'", tenant)
        return digest, int(active), await index.count(SearchFilter(tenant=tenant))

    async def go() -> dict[str, Any]:
        async with memory_app(settings) as app:
            await wait_stopped(app)
            before = await state(app.store, app.index)
            report = await rebuild(app)
            after = await state(app.store, app.index)
        return {"before": before, "after": after, "events": report.events, "seconds": report.seconds,
                "points": report.details}

    async def wait_stopped(app: Any) -> None:
        deadline = time.time() + 30
        while True:  # the stopped service's pull requests expire within seconds
            try:
                await ensure_service_stopped(app.bus)
                return
            except Exception:
                if time.time() > deadline:
                    raise
                await asyncio.sleep(0.5)

    with memory_service_stopped(stack):
        return asyncio.run(go())


def record(case: str, figures: dict[str, float]) -> None:
    """Print one trial's figures and append them to $ENGRAM_FAULTS_OUT (JSON lines) when set."""
    print(f"{case}: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()),
          flush=True)
    if RESULTS_OUT:
        with open(RESULTS_OUT, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"case": case, "time": time.time(), **figures}) + "\n")
