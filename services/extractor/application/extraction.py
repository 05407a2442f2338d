"""One extraction task on one log, exactly once per ``(log_id, task_id)`` and pending episode.

What "done" means in the ledger: the row of ``(log_id, task_id)`` is done for the *episode* it
finished, the log's version at the pending event the task handled. Every way a log asks to be
learned from again makes it pending at a later version, so each is a new attempt of the same task
with no special case: sent back to pending (update_log_status, reconcile, recover), saved again
with new content, deleted and saved again (the same id, a later version). A redelivered event, or
an older one, names an episode the row has done: nothing is written twice. Results stay unique
per ``(log_id, task_id)`` (a new attempt replaces them) and memories change only through the merge
policy's keyed, versioned updates.

    ledger row (running) → claim (ClaimDailyLog: same lifecycle as an external agent) → engine over
    the log's pieces → per fact: by key → keep | update | save (idempotent keys) → extraction result
    → mark processed → ledger row done.

A failure marks the log failed with its reason (the memory service sends it back to pending below
3 tries); a crash leaves the ledger row running and the event unacknowledged, and the redelivered
event replays the same keys, so nothing is written twice.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from datetime import date
from enum import StrEnum
from typing import TYPE_CHECKING
from uuid import UUID

from contracts.daily_logs import turn_digest
from services.extractor.application.ports import (
    ClaimedLog,
    ExtractedMemories,
    ExtractionEngine,
    LogNotice,
    LogSource,
    MemoryWriter,
    Origin,
    TaskLedger,
    TaskRecord,
    Tenants,
)
from services.extractor.domain.consolidate import plan
from services.extractor.domain.dates import dated
from services.extractor.domain.engine import split_turns
from services.extractor.domain.merge import (
    Action,
    as_of,
    decide,
    fact_key,
    memory_key_of,
    person_keys,
    step_key,
    turn_indices,
)
from services.extractor.domain.model import Extraction, Fact

if TYPE_CHECKING:
    from services.extractor.application.modes import ModeGate

log = logging.getLogger("engram.extractor")


class Outcome(StrEnum):
    DONE = "done"
    ALREADY_DONE = "already_done"
    NOT_CLAIMED = "not_claimed"
    WAITING = "waiting"  # left to external agents by the project's extraction mode (agent, handoff)
    FAILED = "failed"
    IGNORED = "ignored"


class ExtractionFailed(Exception):
    """The engine could not extract this log (the reason is recorded on the log)."""


@dataclass
class TaskReport:
    outcome: Outcome
    facts: int = 0
    saved: int = 0
    updated: int = 0
    kept: int = 0
    memory_ids: tuple[UUID, ...] = ()
    error: str | None = None


@dataclass
class Extractor:
    """The extractor's use case: handle one daily-log notice under one task id."""

    engine: ExtractionEngine
    logs: LogSource
    memories: MemoryWriter
    ledger: TaskLedger
    task_id: str
    tenants: Tenants | None = None
    #: the extraction modes (agent, handoff): None claims every pending log at once (re-extraction)
    gate: ModeGate | None = None

    async def handle(self, notice: LogNotice) -> TaskReport:
        """Extract a pending log once for this task, when its project's extraction mode lets the
        pipeline claim it (else it waits for agents); anything else is ignored."""
        if self.tenants is not None:
            await self.tenants.seen(notice.tenant)
        if notice.status != "pending":
            if self.gate is not None:
                await self.gate.left(notice)
            return TaskReport(Outcome.IGNORED)
        existing = await self.ledger.get(notice.log_id, self.task_id)
        if existing is not None and existing.done_for(notice.version):
            return TaskReport(Outcome.ALREADY_DONE, memory_ids=tuple(UUID(m) for m in existing.memory_ids))
        if self.gate is not None and not await self.gate.admits(notice):
            return TaskReport(Outcome.WAITING)
        claimed = await self.logs.claim(notice, self.task_id, key=step_key("claim", notice.log_id, self.task_id,
                                                                         notice.version))
        if claimed is None:
            return TaskReport(Outcome.NOT_CLAIMED)
        record = await self.ledger.start(notice.tenant, notice.log_id, self.task_id, notice.version)
        if record.done_for(notice.version):
            return TaskReport(Outcome.ALREADY_DONE)
        await self._record_task(claimed, notice, "running")
        try:
            extraction = await self.extract(claimed)
        except ExtractionFailed as exc:
            return await self._fail(claimed, notice, str(exc))
        report = await self.complete(claimed, extraction, record, finish=False)
        await self._record_task(claimed, notice, "success", report, extraction)
        await self.logs.mark_processed(claimed.tenant, claimed.log_id,
                                       key=step_key("processed", claimed.log_id, self.task_id, notice.version))
        # the ledger says done only once the log is processed: a crash before this point is resumed
        # by the redelivered event (every step above is keyed, so it is done once); were the ledger
        # done first, the redelivery would stop at "already done" and leave the log processing
        await self.ledger.finish(record)
        return report

    async def complete(self, claimed: ClaimedLog, extraction: Extraction, record: TaskRecord, *,
                       finish: bool = True) -> TaskReport:
        """An extraction's facts written, its result recorded, the ledger row done (the pipeline and
        re-extraction alike; ``finish=False``: the caller marks the ledger row done after its own
        last step)."""
        report = await self.write(claimed, extraction.facts)
        # (log_id, task_id) and the ids: a result is unique per (log_id, task_id) on the memory side, so
        # a resumed task that found other ids (a memory changed meanwhile) replaces it, never duplicates
        await self.logs.record_result(claimed.tenant, claimed.log_id, self.task_id, report.memory_ids,
                                      key=step_key("result", claimed.log_id, self.task_id,
                                                   ",".join(str(m) for m in report.memory_ids)))
        record.status = "done"
        record.memory_ids = [str(m) for m in report.memory_ids]
        record.facts = len(extraction.facts)
        record.prompt_tokens += extraction.prompt_tokens
        record.completion_tokens += extraction.completion_tokens
        if finish:
            await self.ledger.finish(record)
        return report

    async def _record_task(self, claimed: ClaimedLog, notice: LogNotice, status: str,
                           report: TaskReport | None = None, extraction: Extraction | None = None) -> None:
        """The pipeline's task on this log as an extraction task (``RecordExtractionTask``), as
        re-extraction and the external-agent workflow record theirs: ``pipeline_task_id`` (the log
        under the pipeline's task id), the log, the engine, running then success or failed, and the
        counts. Keyed by the claim (the log's version) and what is recorded, so a redelivery records
        each step once, a retry after a failure (a new version) records it again, and a task resumed
        after a crash that counts differently (what the first attempt saved is now known) updates the
        same task's counts (the memory service refuses a key reused for another request)."""
        metrics: dict[str, float] | None = None
        if report is not None:
            metrics = {"facts": float(report.facts), "saved": float(report.saved), "updated": float(report.updated),
                       "kept": float(report.kept), "retry_count": float(claimed.retry_count)}
            if extraction is not None and (extraction.prompt_tokens or extraction.completion_tokens):
                metrics |= {"prompt_tokens": float(extraction.prompt_tokens),
                            "completion_tokens": float(extraction.completion_tokens)}
        await self.logs.record_task(
            claimed.tenant, pipeline_task_id(self.task_id, claimed.log_id), status=status, engine=self.engine.name,
            log_ids=[claimed.log_id], project=claimed.project, metrics=metrics,
            error=report.error if report is not None else None,
            key=step_key(f"task-{status}", claimed.log_id, self.task_id,
                         f"{notice.version}:{sorted((metrics or {}).items())}:{report.error if report else ''}"))

    async def extract(self, claimed: ClaimedLog) -> Extraction:
        """Every piece of the log through the engine (a log too large for one call is split)."""
        total = Extraction(engine=self.engine.name)
        for piece in split_turns(claimed.turns, self.engine.max_chars):
            try:
                part = await self.engine.extract(piece)
            except Exception as exc:  # the engine's own errors, an endpoint down after its retries
                raise ExtractionFailed(f"{self.engine.name} engine: {type(exc).__name__}: {exc}"[:1000]) from exc
            total.facts.extend(part.facts)
            total.prompt_tokens += part.prompt_tokens
            total.completion_tokens += part.completion_tokens
        people = [t.speaker for t in claimed.turns if t.ref.startswith("turn:")]
        total.facts = dated(person_keys(total.facts, people), date.fromisoformat(claimed.log_date))
        return total

    async def write(self, claimed: ClaimedLog, facts: list[Fact]) -> TaskReport:
        """Merge each fact with what is known, through the memory service's commands."""
        report = TaskReport(Outcome.DONE, facts=len(facts))
        ids: list[UUID] = []
        origin = Origin(claimed.log_id, self.task_id, {
            int(t.ref[5:]): turn_digest(t.speaker, t.text) for t in claimed.turns if t.ref.startswith("turn:")})
        log_date = date.fromisoformat(claimed.log_date)
        for fact in facts:
            key = memory_key_of(fact)
            known = await self.memories.by_key(claimed.tenant, claimed.project, key)
            said = as_of(fact, log_date)
            action = decide(fact, known.content if known else None, said, known.as_of if known else None)
            turns = {(claimed.log_id, origin.turn_digests[i]) for i in turn_indices(fact.turn_refs)
                     if i in origin.turn_digests}
            if action is Action.REPEAT and known is not None and (
                    known.as_of == said or (turns and turns <= known.turns_said)):
                # this very saying (a task resumed after a crash; the log saved again with its turns
                # moved, or more turns added before it): nothing to count
                action = Action.KEEP
            if action is Action.KEEP and known is not None:
                report.kept += 1
                ids.append(known.memory_id)
                continue
            idem = fact_key(claimed.log_id, self.task_id, fact, action.value, claimed.episode)
            if action is Action.REPEAT and known is not None:
                # said again: saved in the words held, so the memory service counts this log among the
                # memory's sources (MemoryMerged) without a new version (docs/memory-truth.md)
                await self.memories.save(claimed.tenant, claimed.project, dataclasses.replace(fact, content=known.content),
                                         key, key=idem, origin=origin)
                report.kept += 1
                ids.append(known.memory_id)
                continue
            if action is Action.UPDATE:
                written = await self.memories.update(claimed.tenant, claimed.project, fact, key, key=idem,
                                                     origin=origin)
                report.updated += 1
            else:
                written = await self.memories.save(claimed.tenant, claimed.project, fact, key, key=idem,
                                                   origin=origin)
                report.saved += written.created
                report.updated += written.updated
            ids.append(written.memory_id)
        report.memory_ids = tuple(dict.fromkeys(ids))
        return report

    async def _fail(self, claimed: ClaimedLog, notice: LogNotice, reason: str) -> TaskReport:
        log.warning("log %s (task %s) failed: %s", claimed.log_id, self.task_id, reason)
        await self.logs.mark_failed(claimed.tenant, claimed.log_id, reason,
                                    key=step_key("failed", claimed.log_id, self.task_id, notice.version))
        await self.ledger.fail(claimed.log_id, self.task_id, reason)
        report = TaskReport(Outcome.FAILED, error=reason)
        await self._record_task(claimed, notice, "failed", report)
        return report


def pipeline_task_id(task_id: str, log_id: str) -> str:
    """The extraction task the continuous pipeline records for one log: ``<task_id>:<log_id>`` (its
    results and the memories' provenance name ``task_id``, the pipeline's long-lived task)."""
    return f"{task_id}:{log_id}"


async def consolidate(memories: ExtractedMemories, tenants: Tenants, *, round_id: str) -> int:
    """One consolidation round for every user with logs: near-duplicate extracted memories of one key
    family merged (``domain/consolidate.py``) through the memory service's ``MergeMemory`` — each
    duplicate one more saying of the survivor, then forgotten with a reason naming it (versioned
    events: history is kept). Each command's key derives from the round and the memory, so replicas
    running the same round act once. Returns how many memories were merged away."""
    total = 0
    for tenant in await tenants.all():
        try:
            for merge in plan(await memories.extracted(tenant)).merge:
                total += await memories.merge(tenant, merge.memory, merge.survivor, merge.reason,
                                              key=step_key("consolidate-merge", str(merge.memory.id), round_id))
        except Exception:
            log.exception("consolidation of tenant %s failed (round %s)", tenant, round_id)
    return total


async def run_maintenance(
    logs: LogSource, tenants: Tenants, *, stuck_minutes: int, retention_days: int, round_id: str,
) -> tuple[int, int]:
    """One round of both schedules for every tenant with logs (see :func:`recover_stuck`, :func:`retention`)."""
    recovered = await recover_stuck(logs, tenants, stuck_minutes=stuck_minutes, round_id=round_id)
    deleted = await retention(logs, tenants, retention_days=retention_days, round_id=round_id)
    return recovered, deleted


async def recover_stuck(logs: LogSource, tenants: Tenants, *, stuck_minutes: int, round_id: str) -> int:
    """Logs stuck in processing go back to pending (or failed), tenant by tenant. ``round_id`` makes
    each round's commands idempotent (replicas running the same round act once); a tenant that
    fails is logged and the others still run."""
    total = 0
    for tenant in await tenants.all():
        try:
            total += await logs.recover_stuck(tenant, stuck_minutes, key=f"x:recover:{round_id}")
        except Exception:
            log.exception("recover-stuck of tenant %s failed (round %s)", tenant, round_id)
    return total


async def retention(logs: LogSource, tenants: Tenants, *, retention_days: int, round_id: str) -> int:
    """Processed logs past retention are deleted, tenant by tenant (failed logs are kept)."""
    total = 0
    for tenant in await tenants.all():
        try:
            total += await logs.delete_processed(tenant, retention_days, key=f"x:retention:{round_id}")
        except Exception:
            log.exception("retention of tenant %s failed (round %s)", tenant, round_id)
    return total


__all__ = ["Extractor", "ExtractionFailed", "consolidate", "Outcome", "TaskRecord", "TaskReport", "pipeline_task_id",
           "recover_stuck", "retention", "run_maintenance"]
