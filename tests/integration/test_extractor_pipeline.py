"""The automatic pipeline on real JetStream and Postgres: the memory service in-process (its command
consumer, projectors and query handlers on the bus) and the extractor's application and durable
consumer. A daily log saved → memories with provenance, the log processed, one result; a second save
of the same log and a redelivery write nothing twice; two extractor workers share one queue."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest

from contracts.daily_logs import (
    DAILY_LOG_AGGREGATE,
    DailyLogLookup,
    ExtractionResultList,
    ExtractionTaskView,
    GetDailyLog,
    GetExtractionResults,
    GetExtractionTasks,
    SaveDailyLog,
    SaveDailyLogResult,
    TaskStatus,
    Turn,
    turn_digest,
)
from contracts.memory import MAX_RECALL_LIMIT, MemoryHistory, MemoryHistoryQuery, MemoryList, RecallMemory
from contracts.subjects import Names
from kit.bus import Bus
from kit.client import Client
from services.extractor.adapters.builtin import BuiltinExtraction
from services.extractor.adapters.ledger import PgTaskLedger
from services.extractor.adapters.log_source import ClientLogSource
from services.extractor.adapters.memory_client import ClientMemoryWriter
from services.extractor.adapters.tenants import PgTenants
from services.extractor.application.extraction import Extractor, Outcome, pipeline_task_id
from services.extractor.application.ports import LogNotice
from services.extractor.domain.model import Extraction
from services.extractor.entrypoints import nats as extractor_entry
from services.memory.config import MemorySettings
from services.memory.entrypoints import nats as memory_entry
from services.memory.main import memory_app

pytestmark = pytest.mark.integration
TASK = "builtin-v1"
T = TypeVar("T")

CHAT = [
    Turn(speaker="user", text="Hi there!"),
    Turn(speaker="assistant", text="Hello! How was your day?"),
    Turn(speaker="user", text="I live in Lyon. I adopted a beagle named Biscuit last month."),
    Turn(speaker="assistant", text="Lovely."),
    Turn(speaker="user", text="My favorite color is teal. I want to run a marathon next year."),
]


@dataclass
class Pipeline:
    bus: Bus
    client: Client
    names: Names
    pool: asyncpg.Pool
    schema: str
    stop: asyncio.Event
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    buses: list[Bus] = field(default_factory=list)

    async def worker(self, name: str) -> Extractor:
        """One extractor replica: its own bus connection, the shared ledger and durable consumer."""
        bus = await Bus.connect(self.bus_url, self.names, name=f"engram-extractor-{name}")
        self.buses.append(bus)
        client = Client(bus)
        ledger = PgTaskLedger(self.pool, self.schema)
        extractor = Extractor(engine=BuiltinExtraction(), logs=ClientLogSource(client),
                              memories=ClientMemoryWriter(client), ledger=ledger, task_id=TASK,
                              tenants=PgTenants(self.pool, self.schema))
        spec = extractor_entry.consumer_spec(self.names, DAILY_LOG_AGGREGATE, ack_wait_s=30)
        self.tasks.append(extractor_entry.start(bus, extractor, spec, self.stop, concurrency=2))
        return extractor

    bus_url: str = ""


@pytest.fixture
async def pipeline(infra, tmp_path: Path) -> AsyncIterator[Pipeline]:  # type: ignore[no-untyped-def]
    namespace = infra.fresh_namespace()
    settings = MemorySettings(
        home=tmp_path, nats_url=infra.nats_url, database_url=infra.database_url, namespace=namespace,
        memory_schema="mem_" + uuid.uuid4().hex[:8], late_interaction="none", reranker="none",
    )
    schema = "ext_" + uuid.uuid4().hex[:8]
    async with memory_app(settings) as app:
        stop = asyncio.Event()
        tasks = memory_entry.start(app.bus, app.service, stop)
        await memory_entry.serve_queries(app.bus, app.service)
        pool = await asyncpg.create_pool(infra.database_url, min_size=1, max_size=4)
        assert pool is not None
        await PgTaskLedger(pool, schema).migrate(owner=namespace)
        p = Pipeline(app.bus, Client(app.bus, command_timeout_s=20), app.bus.names, pool, schema, stop,
                     bus_url=infra.nats_url)
        try:
            yield p
        finally:
            stop.set()
            await asyncio.gather(*tasks, *p.tasks, return_exceptions=True)
            for bus in p.buses:
                await bus.close()
            await pool.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            await pool.close()
            await app.bus.delete_streams()


async def until(probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = 60.0) -> T:
    """Poll until ``probe`` answers something (no timing is asserted: the bound only ends a hang)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = await probe()
        if found:
            return found
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.1)


async def save_log(p: Pipeline, tenant: str, day: str, turns: list[Turn] = CHAT, **fields: Any) -> SaveDailyLogResult:
    return await p.client.send(tenant, SaveDailyLog(log_date=date.fromisoformat(day), turns=turns, **fields))  # type: ignore[no-any-return]


async def processed(p: Pipeline, tenant: str, log_id: uuid.UUID) -> DailyLogLookup | None:
    found: DailyLogLookup = await p.client.ask(tenant, GetDailyLog(id=log_id))
    return found if found.log and found.log.processing_status == "processed" else None


async def results(p: Pipeline, tenant: str, log_id: uuid.UUID) -> ExtractionResultList:
    return await p.client.ask(tenant, GetExtractionResults(log_id=log_id))  # type: ignore[no-any-return]


async def memories(p: Pipeline, tenant: str) -> MemoryList:
    return await p.client.ask(tenant, RecallMemory(limit=MAX_RECALL_LIMIT))  # type: ignore[no-any-return]


async def test_a_saved_log_becomes_memories_with_provenance_and_is_processed_once(pipeline: Pipeline) -> None:
    p = pipeline
    extractor = await p.worker("a")
    saved = await save_log(p, "alice", "2025-05-01", events="Went to the climbing gym.")
    await until(lambda: processed(p, "alice", saved.id), "the log processed")

    found = await results(p, "alice", saved.id)
    assert len(found.results) == 1 and found.results[0].task_id == TASK
    result_ids = set(found.results[0].memory_ids)
    listed = (await memories(p, "alice")).memories
    assert result_ids and {m.id for m in listed} == result_ids
    contents = " | ".join(m.content for m in listed)
    assert "Lyon" in contents and "marathon" in contents and "teal" in contents
    for m in listed:
        assert m.provenance is not None and m.provenance.log_id == saved.id and m.provenance.task_id == TASK
        assert m.provenance.log_date == date(2025, 5, 1)
        for i in m.provenance.turns:  # the turns it came from are the user's
            assert CHAT[i].speaker == "user"
    lyon = next(m for m in listed if "Lyon" in m.content)
    assert lyon.provenance is not None and lyon.provenance.turns == [2]
    assert lyon.provenance.turn_digests == [turn_digest(CHAT[2].speaker, CHAT[2].text)]  # as the extractor read it
    history: MemoryHistory = await p.client.ask("alice", MemoryHistoryQuery(memory_id=lyon.id))
    assert history.versions[-1].provenance is not None and history.versions[-1].provenance.log_id == saved.id
    assert "alice" in await PgTenants(p.pool, p.schema).all()

    # the same log saved again: the same content writes nothing; changed content is learned from
    # again (a new episode of the same task), and what it already knew is not written twice
    again = await save_log(p, "alice", "2025-05-01", events="Went to the climbing gym.")
    assert again.id == saved.id and not again.updated and again.processing_status == "processed"
    changed = await save_log(p, "alice", "2025-05-01", events="Went to the climbing gym.", mood=1)
    assert changed.updated and changed.processing_status == "pending"
    await until(lambda: processed(p, "alice", saved.id), "the changed log processed again")
    relearned = await results(p, "alice", saved.id)
    assert len(relearned.results) == 1 and set(relearned.results[0].memory_ids) == result_ids

    # a redelivered pending event (first version), with and without the ledger's row (a crash
    # before the ledger recorded the task done): the claim's key answers its first outcome, every
    # write its key's, so nothing is written twice
    notice = LogNotice(tenant="alice", log_id=str(saved.id), status="pending", version=1, project="default")
    assert (await extractor.handle(notice)).outcome is Outcome.ALREADY_DONE
    await p.pool.execute(f"DELETE FROM {p.schema}.tasks")
    resumed = await extractor.handle(notice)
    assert resumed.outcome is Outcome.DONE and resumed.saved == 0 and set(resumed.memory_ids) == result_ids
    # a new pending version (a fresh claim) is claimed no more: the log is processed
    assert (await extractor.handle(LogNotice("alice", str(saved.id), "pending", 99))).outcome in (
        Outcome.ALREADY_DONE, Outcome.NOT_CLAIMED)

    after = await results(p, "alice", saved.id)
    assert len(after.results) == 1 and set(after.results[0].memory_ids) == result_ids
    assert {m.id for m in (await memories(p, "alice")).memories} == result_ids
    final = await processed(p, "alice", saved.id)
    assert final is not None and final.log is not None and final.log.retry_count == 0


async def test_a_turn_taken_out_of_a_learnt_log_takes_its_memories_and_moves_no_other(pipeline: Pipeline) -> None:
    """The pipeline learns a day; the user saves the day again without its first turns (the Lyon and
    Biscuit turn removed, every other turn at another index). The memories of the removed turn are
    forgotten with the save; the log is learnt from again, and the memories of the turns that stayed
    are not counted as said again for having moved (their sayings stay one)."""
    p = pipeline
    await p.worker("a")
    saved = await save_log(p, "carol", "2025-05-02")
    await until(lambda: processed(p, "carol", saved.id), "the log processed")
    before = {m.content: m for m in (await memories(p, "carol")).memories}
    from_lyon_turn = {m.id for m in before.values() if m.provenance is not None and m.provenance.turns == [2]}
    assert from_lyon_turn and any("Lyon" in c for c in before), before.keys()

    edited = await save_log(p, "carol", "2025-05-02", turns=[CHAT[3], CHAT[4]])
    assert edited.updated and set(edited.forgotten) == from_lyon_turn, edited
    await until(lambda: processed(p, "carol", saved.id), "the edited log processed again")
    after = {m.content: m for m in (await memories(p, "carol")).memories}
    assert not any("Lyon" in c or "Biscuit" in c for c in after), after.keys()
    kept = [m for m in after.values() if m.id not in from_lyon_turn]
    assert kept and all(m.repeats == 1 and m.version == before[m.content].version for m in kept), \
        [(m.content, m.repeats, m.version) for m in kept]


async def test_two_workers_share_the_queue_with_no_duplicate(pipeline: Pipeline) -> None:
    p = pipeline
    await p.worker("a")
    await p.worker("b")
    people = {"alice": [], "bob": []}  # type: dict[str, list[uuid.UUID]]
    for tenant in people:
        for day in range(1, 5):
            turns = [Turn(speaker="user", text=f"I visited museum number {day} in Porto."),
                     Turn(speaker="user", text=f"My {tenant} project {day} is called Heron{day}.")]
            people[tenant].append((await save_log(p, tenant, f"2025-06-0{day}", turns=turns)).id)
    for tenant, ids in people.items():
        for log_id in ids:
            await until(lambda t=tenant, i=log_id: processed(p, t, i), f"log {log_id} processed")
    for tenant, ids in people.items():
        all_result_ids: list[uuid.UUID] = []
        for log_id in ids:
            found = await results(p, tenant, log_id)
            assert len(found.results) == 1, found  # one result per (log_id, task_id)
            all_result_ids += found.results[0].memory_ids
        listed = (await memories(p, tenant)).memories
        contents = [m.content for m in listed]
        assert len(contents) == len(set(contents)), contents  # no memory twice
        assert {m.id for m in listed} == set(all_result_ids)
        assert all(m.provenance is not None and m.provenance.log_id in ids for m in listed)
    counts = await PgTaskLedger(p.pool, p.schema).counts()
    assert counts == {"done": 8}
    assert sorted(await PgTenants(p.pool, p.schema).all()) == ["alice", "bob"]
    # the tenant list is rebuilt from the event log alone
    rebuilt = await extractor_entry.tenants_in_event_log(p.bus, DAILY_LOG_AGGREGATE)
    assert rebuilt == {"alice", "bob"}


async def pipeline_task(p: Pipeline, tenant: str, log_id: uuid.UUID) -> ExtractionTaskView | None:
    found = (await p.client.ask(tenant, GetExtractionTasks(task_id=pipeline_task_id(TASK, str(log_id))))).tasks
    assert len(found) <= 1
    return found[0] if found else None


class FailingEngine:
    name = "builtin"
    max_chars = 100_000

    async def extract(self, turns: object) -> Extraction:
        raise RuntimeError("endpoint down")


async def test_the_pipeline_records_each_task_like_reextract(pipeline: Pipeline) -> None:
    """A log saved → extracted: its task recorded (RecordExtractionTask) running → success with the log,
    the engine, the project and the counts, listed by get_extraction_tasks; a redelivery and a resumed
    crash record nothing more; an engine failure records the task failed with its reason."""
    p = pipeline
    extractor = await p.worker("a")
    saved = await save_log(p, "alice", "2025-05-01")
    await until(lambda: processed(p, "alice", saved.id), "the log processed")
    async def succeeded() -> ExtractionTaskView | None:  # read models are eventually consistent
        found = await pipeline_task(p, "alice", saved.id)
        return found if found is not None and found.status is TaskStatus.SUCCESS else None

    task = await until(succeeded, "the pipeline's task recorded")
    assert task.task_id == f"{TASK}:{saved.id}" and task.status is TaskStatus.SUCCESS
    assert task.log_ids == [saved.id] and task.engine == "builtin" and task.project == "default"
    result = (await results(p, "alice", saved.id)).results[0]
    assert task.metrics["facts"] >= len(result.memory_ids) > 0
    assert task.metrics["retry_count"] == 1  # the claim counted one try
    assert task.started_at is not None and task.finished_at is not None
    listed = (await p.client.ask("alice", GetExtractionTasks(status=TaskStatus.SUCCESS))).tasks
    assert [t.task_id for t in listed] == [task.task_id]

    # a redelivered event, then a crash after the claim (the ledger row lost): the task's records
    # carry the claim's keys, so the memory service answers them with their first outcome
    notice = LogNotice(tenant="alice", log_id=str(saved.id), status="pending", version=1, project="default")
    assert (await extractor.handle(notice)).outcome is Outcome.ALREADY_DONE
    await p.pool.execute(f"DELETE FROM {p.schema}.tasks")
    assert (await extractor.handle(notice)).outcome is Outcome.DONE
    again = await pipeline_task(p, "alice", saved.id)  # the same task, its counts those of the resumed run
    assert again is not None and again.id == task.id and again.status is TaskStatus.SUCCESS
    assert again.log_ids == [saved.id] and again.metrics["saved"] == 0 and again.metrics["kept"] > 0
    assert (await extractor.handle(notice)).outcome is Outcome.ALREADY_DONE
    assert (await pipeline_task(p, "alice", saved.id)) == again  # a redelivery records nothing more



async def test_a_failed_task_is_recorded_failed_and_its_retry_success(pipeline: Pipeline) -> None:
    p = pipeline  # no consumer: the application handles the log's events directly

    def extractor(engine: object) -> Extractor:
        return Extractor(engine=engine, logs=ClientLogSource(p.client),  # type: ignore[arg-type]
                         memories=ClientMemoryWriter(p.client), ledger=PgTaskLedger(p.pool, p.schema), task_id=TASK)

    saved = await save_log(p, "bob", "2025-05-02")

    async def notice() -> LogNotice:
        view = (await p.client.ask("bob", GetDailyLog(id=saved.id))).log
        assert view is not None
        return LogNotice(tenant="bob", log_id=str(saved.id), status=view.processing_status.value,
                         version=view.version)

    first = await notice()
    assert (await extractor(FailingEngine()).handle(first)).outcome is Outcome.FAILED
    task = await pipeline_task(p, "bob", saved.id)
    assert task is not None and task.status is TaskStatus.FAILED and "endpoint down" in (task.error or "")
    assert task.log_ids == [saved.id] and task.finished_at is not None
    retry = await notice()  # back to pending below 3 tries: a new version, a new claim
    assert retry.status == "pending"
    assert (await extractor(BuiltinExtraction()).handle(retry)).outcome is Outcome.DONE
    task = await pipeline_task(p, "bob", saved.id)
    assert task is not None and task.status is TaskStatus.SUCCESS and task.metrics["retry_count"] == 2
    assert task.metrics["facts"] > 0
    assert task.error is None  # the failed attempt's error went with its failure
    listed = (await p.client.ask("bob", GetExtractionTasks(status=TaskStatus.SUCCESS))).tasks
    assert [(t.task_id, t.error) for t in listed] == [(task.task_id, None)]
    # the first attempt's event redelivered after the success, to a worker whose engine fails: the
    # ledger knows the task done, so nothing is recorded and the task stays a success with no error
    assert (await extractor(FailingEngine()).handle(first)).outcome is Outcome.ALREADY_DONE
    assert (await pipeline_task(p, "bob", saved.id)) == task


class LostOnce:
    """A log source whose first ``mark_processed`` is lost (the process dies right before it)."""

    def __init__(self, inner: ClientLogSource) -> None:
        self.inner = inner
        self.lost = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def mark_processed(self, tenant: str, log_id: str, *, key: str) -> None:
        if not self.lost:
            self.lost += 1
            raise ConnectionError("killed before the log was marked processed")
        await self.inner.mark_processed(tenant, log_id, key=key)


async def test_a_crash_before_the_log_is_marked_is_resumed_by_the_redelivery(pipeline: Pipeline) -> None:
    """Found by the fault suite (kill -9 of the extractor): the ledger said done before the log was
    marked processed, so the redelivered event stopped at "already done" and the log stayed
    processing. The ledger is now done last: the redelivery finishes the log, its facts once."""
    p = pipeline
    logs = LostOnce(ClientLogSource(p.client))
    extractor = Extractor(engine=BuiltinExtraction(), logs=logs,  # type: ignore[arg-type]
                          memories=ClientMemoryWriter(p.client), ledger=PgTaskLedger(p.pool, p.schema), task_id=TASK)
    saved = await save_log(p, "cleo", "2025-05-03")
    view = (await p.client.ask("cleo", GetDailyLog(id=saved.id))).log
    assert view is not None
    notice = LogNotice(tenant="cleo", log_id=str(saved.id), status=view.processing_status.value, version=view.version)
    with pytest.raises(ConnectionError):
        await extractor.handle(notice)
    before = (await memories(p, "cleo")).memories
    assert (await extractor.handle(notice)).outcome is Outcome.DONE  # the same event, redelivered
    done = await processed(p, "cleo", saved.id)
    assert done is not None and done.log is not None and done.log.processing_status.value == "processed"
    after = (await memories(p, "cleo")).memories
    assert sorted(m.content for m in after) == sorted(m.content for m in before) and after  # facts once
    assert len((await results(p, "cleo", saved.id)).results) == 1
    assert (await extractor.handle(notice)).outcome is Outcome.ALREADY_DONE
