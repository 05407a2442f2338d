"""Load shedding on the bus: a query still queued at a service after its caller gave up (its
deadline header is past) is dropped, not handled for nobody (kit/bus.py, Engram-Deadline)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from contracts.envelope import CommandEnvelope, QueryEnvelope, Reply
from kit import metrics
from kit.bus import Bus

pytestmark = pytest.mark.integration


async def test_a_query_whose_caller_gave_up_is_not_handled(bus: Bus) -> None:
    release = asyncio.Event()
    handled: list[str] = []

    async def slow(query: QueryEnvelope) -> Reply[dict[str, str]]:
        handled.append(str(query.payload["n"]))
        await release.wait()
        return Reply.success({"n": str(query.payload["n"])})

    subs = await bus.serve_queries("svc", {"slow": slow}, concurrency=1)  # one at a time: the rest queue
    shed_before = metrics.QUERIES_SHED.labels("svc", "slow")._value.get()
    try:
        first = asyncio.create_task(bus.query("svc", "slow", QueryEnvelope(type="slow", payload={"n": 0}), timeout=30))
        while not handled:  # the first query holds the only slot
            await asyncio.sleep(0.01)
        # two more queries wait behind it; their callers give up (the bus answers TIMEOUT)
        late = await asyncio.gather(*(bus.query("svc", "slow", QueryEnvelope(type="slow", payload={"n": i}),
                                                timeout=0.3) for i in (1, 2)))
        assert [r.ok for r in late] == [False, False]
        await asyncio.sleep(0.3)  # past the deadline slack
        release.set()
        assert (await first).ok
        for _ in range(200):  # bounded: the queued two are taken from the queue and dropped
            if metrics.QUERIES_SHED.labels("svc", "slow")._value.get() - shed_before == 2:
                break
            await asyncio.sleep(0.01)
        assert handled == ["0"]
        assert metrics.QUERIES_SHED.labels("svc", "slow")._value.get() - shed_before == 2
    finally:
        for sub in subs:
            await sub.unsubscribe()


async def test_an_answer_larger_than_the_bus_carries_is_a_clear_failure_not_a_timeout(bus: Bus) -> None:
    """A reply over the server's ``max_payload`` cannot be sent: the caller hears why at once (how
    large, the limit, what to ask instead), where it used to wait out its timeout for nothing."""
    limit = bus.nc.max_payload

    async def huge(query: QueryEnvelope) -> Reply[dict[str, str]]:
        return Reply.success({"text": "x" * (limit + 1)})

    async def small(query: QueryEnvelope) -> Reply[dict[str, str]]:
        return Reply.success({"text": "y" * 1000})

    subs = await bus.serve_queries("svc", {"huge": huge, "small": small})
    try:
        reply = await bus.query("svc", "huge", QueryEnvelope(type="huge", payload={}), timeout=30)
        assert not reply.ok
        assert reply.error is not None and reply.error.code == "invalid_argument"
        assert f"{limit:,}" in reply.error.message and "ask for less" in reply.error.message
        fine = await bus.query("svc", "small", QueryEnvelope(type="small", payload={}), timeout=30)
        assert fine.ok and fine.result == {"text": "y" * 1000}
    finally:
        for sub in subs:
            await sub.unsubscribe()


async def test_a_command_larger_than_the_bus_carries_is_refused_before_anything_is_written(bus: Bus) -> None:
    """Every field within its own limit can still add up to more than one message may be (a daily
    log of 200,000 four-byte characters and four long fields: 1.1 MB). Such a command is refused at
    once, naming its size and the limit (it used to be a 500 from the gateway); nothing is queued."""
    stream = bus.names.commands_stream
    before = (await bus.js.stream_info(stream)).state.messages
    big = CommandEnvelope(command_id=uuid.uuid4().hex, type="noop", tenant="alice",
                          payload={"text": "🏔" * (bus.nc.max_payload // 4)})
    reply = await bus.send_command("svc", "noop", big, timeout=30)
    assert not reply.ok and reply.error is not None and reply.error.code == "invalid_argument"
    assert "this noop request is" in reply.error.message and "send less" in reply.error.message
    assert (await bus.js.stream_info(stream)).state.messages == before
