"""The bus on real JetStream: idempotent commands, optimistic concurrency, redelivery, dead letters."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import replace

import pytest
from nats.aio.msg import Msg
from nats.js.errors import NotFoundError

from contracts.envelope import CommandEnvelope, EventEnvelope, utcnow
from contracts.subjects import HEADER_ERROR, HEADER_MSG_ID
from kit.bus import Bus, ConcurrencyConflict, PoisonMessage

pytestmark = pytest.mark.integration


def command(command_id: str, text: str = "x") -> CommandEnvelope:
    return CommandEnvelope(command_id=command_id, type="noop", tenant="alice", payload={"text": text})


def event(aggregate_id: str) -> EventEnvelope:
    return EventEnvelope(
        event_id=uuid.uuid4(), type="Thing", occurred_at=utcnow(), tenant="alice", aggregate="thing",
        aggregate_id=aggregate_id, correlation_id="c", causation_id="k", data={"n": 1},
    )


async def run_consumer(bus: Bus, spec, handler, until, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    stop = asyncio.Event()
    task = asyncio.create_task(bus.consume(spec, handler, stop, batch=8))
    try:
        async with asyncio.timeout(timeout):
            while not until():
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await task


async def dead_letters(bus: Bus) -> list[Msg]:
    sub = await bus.js.subscribe(f"{bus.names.namespace}.dlq.>", ordered_consumer=True)
    out = []
    try:
        while True:
            out.append(await sub.next_msg(timeout=1.0))
    except Exception:
        pass
    await sub.unsubscribe()
    return out


async def test_duplicate_command_has_one_effect(bus: Bus) -> None:
    subject = bus.names.command("svc", "noop")
    for _ in range(3):
        await bus.js.publish(subject, command("same-key-123").model_dump_json().encode(),
                             headers={HEADER_MSG_ID: "same-key-123"})
    await bus.js.publish(subject, command("other-key-456").model_dump_json().encode(),
                         headers={HEADER_MSG_ID: "other-key-456"})
    seen: list[str] = []

    async def handle(msg: Msg) -> None:
        seen.append(CommandEnvelope.model_validate_json(msg.data).command_id)

    await run_consumer(bus, bus.names.command_consumer("svc"), handle, lambda: len(seen) >= 2)
    await asyncio.sleep(0.3)
    assert sorted(seen) == ["other-key-456", "same-key-123"]


async def test_concurrent_writers_on_one_aggregate_one_wins(bus: Bus) -> None:
    subject = bus.names.event("alice", "thing", "a1")
    results = await asyncio.gather(
        *(bus.append_event(subject, event("a1"), expected_last_seq=0) for _ in range(5)), return_exceptions=True
    )
    wins = [r for r in results if isinstance(r, int)]
    losses = [r for r in results if isinstance(r, ConcurrencyConflict)]
    assert len(wins) == 1 and len(losses) == 4
    last = await bus.last_event(subject)
    assert last is not None and last[1] == wins[0]


async def test_retried_event_append_is_recognised(bus: Bus) -> None:
    subject = bus.names.event("alice", "thing", "a2")
    e = event("a2")
    first = await bus.append_event(subject, e, expected_last_seq=0)
    again = await bus.append_event(subject, e, expected_last_seq=0)
    assert again == first
    info = await bus.js.stream_info(bus.names.events_stream)
    assert info.state.messages == 1


async def test_a_retried_append_gets_the_event_the_log_holds(bus: Bus) -> None:
    """A retry recomputes its event (a new clock reading) under the same event id: the retry is told
    the first attempt's event, in the duplicate window and past it (the expected sequence moved)."""
    subject = bus.names.event("alice", "thing", "a3")
    first = event("a3")
    retry = first.model_copy(update={"data": {**first.data, "retried": True}})
    seq, stored = await bus.append_event_once(subject, first, expected_last_seq=0)
    assert stored is first
    again, held = await bus.append_event_once(subject, retry, expected_last_seq=0)
    assert (again, held.data) == (seq, first.data)
    info = await bus.js.stream_info(bus.names.events_stream)
    assert info.state.messages == 1


async def test_an_event_purged_within_the_duplicate_window_is_appended_again(bus: Bus) -> None:
    """A user's purge removes their events while the stream's duplicate window still knows the ids;
    an import run again at once writes the same events (ids derived from what they restore). They
    are appended again, once: a retry of that append is recognised and appends nothing."""
    subject = bus.names.event("alice", "thing", "a4")
    e = event("a4")
    await bus.append_event(subject, e, expected_last_seq=0)
    await bus.js.purge_stream(bus.names.events_stream, subject=subject)
    assert await bus.last_event(subject) is None
    seq, stored = await bus.append_event_once(subject, e, expected_last_seq=0)
    assert stored is e
    again, held = await bus.append_event_once(subject, e, expected_last_seq=0)  # the retry
    assert (again, held.event_id) == (seq, e.event_id)
    assert [found.event_id for found, _ in await bus.history(subject)] == [e.event_id]
    # without an expected sequence too (the auth service's events), and a retry of that append
    other = bus.names.event("alice", "thing", "a5")
    f = event("a5")
    await bus.append_event(other, f, expected_last_seq=None)
    await bus.js.purge_stream(bus.names.events_stream, subject=other)
    first = await bus.append_event(other, f, expected_last_seq=None)
    assert await bus.append_event(other, f, expected_last_seq=None) == first
    assert [found.event_id for found, _ in await bus.history(other)] == [f.event_id]
    # purged twice within one window: the log cannot tell a retry from a new append, and says so
    await bus.js.purge_stream(bus.names.events_stream, subject=other)
    with pytest.raises(NotFoundError):
        await bus.append_event(other, f, expected_last_seq=None)


async def test_redelivery_after_crash_mid_handling(bus: Bus) -> None:
    spec = replace(bus.names.command_consumer("crashy"), ack_wait_s=1.0, backoff_s=())
    await bus.js.publish(bus.names.command("crashy", "noop"), command("crash-key-001").model_dump_json().encode(),
                         headers={HEADER_MSG_ID: "crash-key-001"})
    # A worker takes the message and dies before acknowledging it.
    await bus.ensure_consumer(spec)
    doomed = await bus.js.pull_subscribe_bind(spec.durable, stream=spec.stream)
    taken = await doomed.fetch(1, timeout=5)
    assert len(taken) == 1
    await doomed.unsubscribe()
    handled: list[int] = []

    async def handle(msg: Msg) -> None:
        handled.append(msg.metadata.num_delivered)

    await run_consumer(bus, spec, handle, lambda: bool(handled))
    await asyncio.sleep(0.3)
    # Not lost, handled once by the surviving worker, and acknowledged. (The delivery count is
    # normally 2 here; under heavy load NATS 2.9 was once seen reporting 1, so it is not asserted.)
    assert len(handled) == 1
    state = await bus.consumer_state(spec.stream, spec.durable)
    assert state is not None and state.ack_pending == 0 and state.pending == 0


async def test_a_message_held_longer_than_the_first_retry_delay_is_not_redelivered(bus: Bus) -> None:
    """The consumer keeps a fetched batch while it prepares the next one: a message unacked for
    longer than the first retry delay (but within the ack wait) must not come back meanwhile."""
    spec = replace(bus.names.command_consumer("slow"), ack_wait_s=10.0, backoff_s=(0.2, 1.0))
    for i in range(3):
        await bus.js.publish(bus.names.command("slow", "noop"), command(f"slow-key-{i:03d}").model_dump_json().encode())
    handled: list[tuple[int, int]] = []

    async def handle(msg: Msg) -> None:
        await asyncio.sleep(0.5)
        handled.append((msg.metadata.sequence.stream, msg.metadata.num_delivered))

    await run_consumer(bus, spec, handle, lambda: len(handled) >= 3)
    assert [delivered for _, delivered in sorted(handled)] == [1, 1, 1]
    info = await bus.js.consumer_info(spec.stream, spec.durable)
    assert info.num_redelivered == 0 and info.num_ack_pending == 0


async def test_transient_failure_retries_then_succeeds(bus: Bus) -> None:
    spec = replace(bus.names.command_consumer("flaky"), backoff_s=(0.1, 0.2))
    await bus.js.publish(bus.names.command("flaky", "noop"), command("flaky-key-01").model_dump_json().encode())
    attempts: list[int] = []

    async def handle(msg: Msg) -> None:
        attempts.append(msg.metadata.num_delivered)
        if len(attempts) < 3:
            raise ConnectionError("database briefly unavailable")

    await run_consumer(bus, spec, handle, lambda: len(attempts) >= 3)
    assert attempts == [1, 2, 3]
    assert await dead_letters(bus) == []


async def test_poison_message_goes_to_dead_letter_and_consumer_keeps_running(bus: Bus) -> None:
    spec = bus.names.command_consumer("poison")
    subject = bus.names.command("poison", "noop")
    await bus.js.publish(subject, b"{not json at all")
    await bus.js.publish(subject, command("good-key-001").model_dump_json().encode())
    good: list[str] = []

    async def handle(msg: Msg) -> None:
        good.append(CommandEnvelope.model_validate_json(msg.data).command_id)

    await run_consumer(bus, spec, handle, lambda: bool(good))
    assert good == ["good-key-001"]
    dead = await dead_letters(bus)
    assert len(dead) == 1
    assert dead[0].data == b"{not json at all"
    assert "ValidationError" in dead[0].headers[HEADER_ERROR]


async def test_exhausted_retries_go_to_dead_letter(bus: Bus) -> None:
    spec = replace(bus.names.command_consumer("doomed"), max_deliver=3, backoff_s=(0.05,))
    await bus.js.publish(bus.names.command("doomed", "noop"), command("doomed-key-1").model_dump_json().encode())
    attempts: list[int] = []

    async def handle(msg: Msg) -> None:
        attempts.append(msg.metadata.num_delivered)
        raise RuntimeError("always fails")

    await run_consumer(bus, spec, handle, lambda: len(attempts) >= 3)
    await asyncio.sleep(0.3)
    dead = await dead_letters(bus)
    assert attempts == [1, 2, 3]
    assert len(dead) == 1 and "after 3 attempts" in dead[0].headers[HEADER_ERROR]
    assert json.loads(dead[0].data)["command_id"] == "doomed-key-1"


async def test_explicit_poison_is_not_retried(bus: Bus) -> None:
    spec = bus.names.command_consumer("refuse")
    await bus.js.publish(bus.names.command("refuse", "noop"), command("refuse-key-1").model_dump_json().encode())
    attempts: list[int] = []

    async def handle(msg: Msg) -> None:
        attempts.append(1)
        raise PoisonMessage("unknown schema version 99")

    await run_consumer(bus, spec, handle, lambda: bool(attempts))
    await asyncio.sleep(0.3)
    assert attempts == [1]
    assert len(await dead_letters(bus)) == 1


async def test_batches_are_prepared_before_they_are_handled_and_the_next_one_meanwhile(bus: Bus) -> None:
    """Each batch is handled, in order, after its preparation; under a backlog the preparing side
    (the embedder) always has the next batch queued: batch k+1 is fetched and its preparation
    started before batch k's preparation ends, so no fetch or lookup sits between two embeddings.
    Preparations run one at a time, like an embedder pool."""
    spec = bus.names.command_consumer("deep")
    for i in range(40):
        await bus.js.publish(bus.names.command("deep", "noop"), command(f"deep-key-{i:04d}").model_dump_json().encode())
    loop = asyncio.get_running_loop()
    started: list[float] = []
    ended: list[float] = []
    prepared: set[str] = set()
    handled: list[str] = []
    embedder = asyncio.Lock()

    async def prepare(msgs: list[Msg]) -> None:
        started.append(loop.time())
        async with embedder:
            await asyncio.sleep(0.1)  # like embedding a batch off the event loop
        prepared.update(CommandEnvelope.model_validate_json(m.data).command_id for m in msgs)
        ended.append(loop.time())

    async def handle(msg: Msg) -> None:
        cid = CommandEnvelope.model_validate_json(msg.data).command_id
        assert cid in prepared, "handled before its batch was prepared"
        handled.append(cid)

    stop = asyncio.Event()
    task = asyncio.create_task(bus.consume(spec, handle, stop, batch=8, prepare=prepare))
    async with asyncio.timeout(20):
        while len(handled) < 40:
            await asyncio.sleep(0.05)
    stop.set()
    await task
    assert handled == [f"deep-key-{i:04d}" for i in range(40)]
    assert len(started) == 5
    assert all(started[k + 1] < ended[k] for k in range(4)), (started, ended)
