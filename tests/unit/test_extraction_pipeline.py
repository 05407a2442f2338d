"""The extractor's application over in-memory ports: exactly once per (log_id, task_id), failures,
redeliveries, a crash mid-task, two workers. The memory service's real idempotency (one outcome per
key) is modelled by the fakes so that the application's keys are what is tested."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date

import pytest

from services.extractor.application.extraction import Extractor, Outcome, pipeline_task_id
from services.extractor.application.ports import (
    ClaimedLog,
    KnownMemory,
    LogNotice,
    Origin,
    TaskRecord,
    Written,
)
from services.extractor.domain.engine import BuiltinEngine, turns_from_text
from services.extractor.domain.merge import as_of
from services.extractor.domain.model import Extraction, Fact, Turn

pytestmark = pytest.mark.unit

CHAT = "user: I live in Lyon. I love hiking with my dog.\nassistant: Nice!\nuser: I want to run a marathon."


class Engine:
    name = "builtin"

    def __init__(self, max_chars: int = 100_000, fail: bool = False) -> None:
        self.max_chars = max_chars
        self.fail = fail
        self.calls = 0

    async def extract(self, turns: Sequence[Turn]) -> Extraction:
        self.calls += 1
        if self.fail:
            raise RuntimeError("endpoint down")
        return Extraction(facts=BuiltinEngine().extract(turns), engine=self.name, prompt_tokens=10)


LOG_DAY = "2026-12-01"

@dataclass
class Logs:
    turns: list[Turn]
    status: str = "pending"
    outcomes: dict[str, object] = field(default_factory=dict)
    results: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    tasks: dict[str, dict[str, object]] = field(default_factory=dict)  # task_id → its record
    task_steps: list[tuple[str, str]] = field(default_factory=list)  # (task_id, status), once per key

    async def claim(self, notice: LogNotice, task_id: str, *, key: str) -> ClaimedLog | None:
        if key not in self.outcomes:  # the memory service answers a repeated key with its first outcome
            won = self.status == "pending"
            if won:
                self.status = "processing"
            self.outcomes[key] = won
        if not self.outcomes[key]:
            return None
        return ClaimedLog(notice.tenant, notice.log_id, "default", LOG_DAY, self.turns)

    async def record_result(self, tenant: str, log_id: str, task_id: str, memory_ids: Sequence[uuid.UUID], *,
                            key: str) -> None:
        self.results[(log_id, task_id)] = [str(m) for m in memory_ids]  # unique per (log_id, task_id)

    async def mark_processed(self, tenant: str, log_id: str, *, key: str) -> None:
        self.status = "processed"

    async def mark_failed(self, tenant: str, log_id: str, reason: str, *, key: str) -> None:
        if key not in self.outcomes:
            self.outcomes[key] = True
            self.failures.append(reason)
            self.status = "pending" if len(self.failures) < 3 else "failed"

    async def record_task(self, tenant: str, task_id: str, *, status: str, engine: str,
                          log_ids: Sequence[str] = (), metrics: dict[str, float] | None = None,
                          error: str | None = None, project: str | None = None, key: str) -> None:
        request = (task_id, status, engine, tuple(log_ids), sorted((metrics or {}).items()), error, project)
        if key in self.outcomes:  # the memory service refuses a key reused for another request
            assert self.outcomes[key] == request, f"idempotency key {key} reused for another request"
            return
        self.outcomes[key] = request
        self.task_steps.append((task_id, status))
        record = self.tasks.setdefault(task_id, {})
        record.update({k: v for k, v in {"status": status, "engine": engine, "log_ids": list(log_ids) or None,
                                         "metrics": metrics, "error": error, "project": project}.items()
                       if v is not None})  # fields omitted are kept, as the memory service does

    async def recover_stuck(self, tenant: str, timeout_minutes: int, *, key: str) -> int:
        return 0

    async def delete_processed(self, tenant: str, retention_days: int, *, key: str) -> int:
        return 0


@dataclass
class Memories:
    by_key_: dict[str, KnownMemory] = field(default_factory=dict)
    keys_seen: dict[str, Written] = field(default_factory=dict)
    writes: int = 0
    crash_after: int | None = None

    async def by_key(self, tenant: str, project: str, memory_key: str) -> KnownMemory | None:
        return self.by_key_.get(memory_key)

    async def _write(self, fact: Fact, memory_key: str, key: str, update: bool) -> Written:
        if key in self.keys_seen:
            return self.keys_seen[key]
        if self.crash_after is not None and self.writes >= self.crash_after:
            self.crash_after = None
            raise ConnectionError("killed mid-task")
        self.writes += 1
        known = self.by_key_.get(memory_key)
        mid = known.memory_id if known else uuid.uuid4()
        # as the memory service's client reads it back: when the content was said (its log's day, first turn)
        said = as_of(fact, date.fromisoformat(LOG_DAY))
        self.by_key_[memory_key] = KnownMemory(mid, fact.content, memory_key, (known.version + 1) if known else 1, said)
        written = Written(mid, created=known is None, updated=known is not None)
        self.keys_seen[key] = written
        return written

    async def save(self, tenant: str, project: str, fact: Fact, memory_key: str, *, key: str,
                   origin: Origin | None = None) -> Written:
        assert origin is not None and origin.log_id and origin.task_id  # every extracted memory has provenance
        return await self._write(fact, memory_key, key, False)

    async def update(self, tenant: str, project: str, fact: Fact, memory_key: str, *, key: str,
                     origin: Origin | None = None) -> Written:
        assert origin is not None and origin.log_id and origin.task_id
        return await self._write(fact, memory_key, key, True)


@dataclass
class Ledger:
    rows: dict[tuple[str, str], TaskRecord] = field(default_factory=dict)

    async def start(self, tenant: str, log_id: str, task_id: str, episode: int = 0) -> TaskRecord:
        row = self.rows.get((log_id, task_id))
        if row is None:
            row = self.rows[(log_id, task_id)] = TaskRecord(log_id, task_id, tenant, "running", 1, episode=episode)
        elif not row.done_for(episode):
            row.status, row.attempts, row.episode = "running", row.attempts + 1, max(row.episode, episode)
        return row

    async def finish(self, record: TaskRecord) -> None:
        self.rows[(record.log_id, record.task_id)] = record

    async def fail(self, log_id: str, task_id: str, error: str) -> None:
        row = self.rows[(log_id, task_id)]
        if row.status != "done":
            row.status, row.error = "failed", error

    async def get(self, log_id: str, task_id: str) -> TaskRecord | None:
        return self.rows.get((log_id, task_id))


def setup(engine: Engine | None = None) -> tuple[Extractor, Logs, Memories, Ledger]:
    logs, memories, ledger = Logs(turns_from_text(CHAT)), Memories(), Ledger()
    return Extractor(engine or Engine(), logs, memories, ledger, "builtin-v1"), logs, memories, ledger


NOTICE = LogNotice(tenant="alice", log_id="log-1", status="pending", version=1)


async def test_a_pending_log_is_extracted_recorded_and_marked_processed() -> None:
    extractor, logs, memories, ledger = setup()
    report = await extractor.handle(NOTICE)
    assert report.outcome is Outcome.DONE and report.saved == 3 == memories.writes
    assert logs.status == "processed"
    assert len(logs.results[("log-1", "builtin-v1")]) == 3
    row = ledger.rows[("log-1", "builtin-v1")]
    assert row.status == "done" and row.facts == 3 and row.prompt_tokens == 10


async def test_the_pipeline_records_its_task_on_the_log_running_then_success() -> None:
    extractor, logs, _, _ = setup()
    await extractor.handle(NOTICE)
    task = pipeline_task_id("builtin-v1", "log-1")
    assert task == "builtin-v1:log-1"
    assert logs.task_steps == [(task, "running"), (task, "success")]
    record = logs.tasks[task]
    assert record["log_ids"] == ["log-1"] and record["engine"] == "builtin" and record["project"] == "default"
    assert record["metrics"] == {"facts": 3.0, "saved": 3.0, "updated": 0.0, "kept": 0.0, "retry_count": 0.0,
                                 "prompt_tokens": 10.0, "completion_tokens": 0.0}


async def test_a_redelivered_event_writes_nothing_twice() -> None:
    extractor, logs, memories, _ = setup()
    await extractor.handle(NOTICE)
    again = await extractor.handle(NOTICE)
    assert again.outcome is Outcome.ALREADY_DONE
    assert memories.writes == 3


async def test_a_crash_mid_task_resumes_with_the_same_keys() -> None:
    extractor, logs, memories, ledger = setup()
    memories.crash_after = 1
    with pytest.raises(ConnectionError):
        await extractor.handle(NOTICE)  # the event stays unacknowledged
    assert logs.status == "processing" and ledger.rows[("log-1", "builtin-v1")].status == "running"
    report = await extractor.handle(NOTICE)  # redelivered: the claim's key answers its first outcome
    assert report.outcome is Outcome.DONE
    assert memories.writes == 3 and len(memories.by_key_) == 3
    assert logs.status == "processed"
    task = pipeline_task_id("builtin-v1", "log-1")  # the task recorded once per step, whatever the retries
    assert logs.task_steps == [(task, "running"), (task, "success")]
    await extractor.handle(NOTICE)
    assert logs.task_steps == [(task, "running"), (task, "success")]


async def test_a_log_sent_back_to_pending_is_learned_from_again_once_without_duplicates() -> None:
    extractor, logs, memories, ledger = setup()
    await extractor.handle(NOTICE)
    logs.status = "pending"  # update_log_status(pending): the log's next version, pending
    requeued = LogNotice(tenant="alice", log_id="log-1", status="pending", version=4)
    report = await extractor.handle(requeued)
    assert report.outcome is Outcome.DONE and report.kept == 3 and report.saved == 0  # a new attempt, same task
    assert logs.status == "processed" and memories.writes == 3 and len(logs.results) == 1
    assert ledger.rows[("log-1", "builtin-v1")].episode == 4
    for old in (NOTICE, requeued):  # redelivered, or delivered late: that episode is done
        assert (await extractor.handle(old)).outcome is Outcome.ALREADY_DONE
    logs.turns = turns_from_text("user: I live in Paris.")  # saved again with new content: pending again
    logs.status = "pending"
    changed = await extractor.handle(LogNotice(tenant="alice", log_id="log-1", status="pending", version=7))
    assert changed.outcome is Outcome.DONE and changed.updated == 1
    assert memories.by_key_["profile.location"].content == "The user lives in Paris."


async def test_a_second_worker_loses_the_claim() -> None:
    first, logs, memories, ledger = setup()
    second = Extractor(Engine(), logs, memories, Ledger(), "builtin-v1")
    await first.handle(NOTICE)
    other = LogNotice(tenant="alice", log_id="log-1", status="pending", version=2)
    assert (await second.handle(other)).outcome is Outcome.NOT_CLAIMED
    assert memories.writes == 3


async def test_a_log_saved_again_with_the_same_facts_adds_no_memory_under_a_new_task() -> None:
    extractor, logs, memories, ledger = setup()
    await extractor.handle(NOTICE)
    logs.status = "pending"
    rerun = Extractor(Engine(), logs, memories, ledger, "builtin-v2")
    report = await rerun.handle(LogNotice(tenant="alice", log_id="log-1", status="pending", version=5))
    assert report.outcome is Outcome.DONE and report.kept == 3 and report.saved == 0
    assert memories.writes == 3 and len(logs.results) == 2


async def test_a_contradicted_slot_is_updated() -> None:
    extractor, logs, memories, _ = setup()
    await extractor.handle(NOTICE)
    logs.turns = turns_from_text("user: I live in Paris.")
    logs.status = "pending"
    report = await Extractor(Engine(), logs, memories, Ledger(), "t2").handle(NOTICE)
    assert report.updated == 1
    assert memories.by_key_["profile.location"].content == "The user lives in Paris."
    assert memories.by_key_["profile.location"].version == 2


async def test_an_engine_failure_marks_the_log_failed_with_its_reason_and_it_is_retried() -> None:
    engine = Engine(fail=True)
    extractor, logs, memories, ledger = setup(engine)
    for version in (1, 2, 3):
        report = await extractor.handle(LogNotice("alice", "log-1", "pending", version))
        assert report.outcome is Outcome.FAILED and "endpoint down" in (report.error or "")
    assert logs.status == "failed" and len(logs.failures) == 3
    assert ledger.rows[("log-1", "builtin-v1")].attempts == 3
    assert memories.writes == 0
    task = pipeline_task_id("builtin-v1", "log-1")  # each try recorded: running, then failed with the reason
    assert logs.task_steps == [(task, "running"), (task, "failed")] * 3
    assert logs.tasks[task]["status"] == "failed" and "endpoint down" in str(logs.tasks[task]["error"])


async def test_events_of_logs_not_pending_are_ignored() -> None:
    extractor, *_ = setup()
    for status in ("processing", "processed", "failed"):
        assert (await extractor.handle(LogNotice("alice", "log-1", status, 1))).outcome is Outcome.IGNORED


async def test_a_log_larger_than_one_call_is_extracted_in_pieces() -> None:
    engine = Engine(max_chars=40)
    extractor, logs, memories, _ = setup(engine)
    report = await extractor.handle(NOTICE)
    assert engine.calls > 1 and report.saved == 3
