"""The memory application, composed: its handler families over its ports and the search engine,
and the handler tables kit's :class:`~kit.service.ServiceRuntime` dispatches through.

=========================  =====================================================================
``service.py``             this composition: :class:`MemoryService` and its handler tables
``memories.py``            save, update, forget (and their batch priming); reads of memories
``shared.py``              shared memories
``daily_logs.py``          daily logs: save, the lifecycle (claim, processed, failed, …), retention
``extraction.py``          extraction tasks and results
``user_records.py``        a user's records: export pages, restores, the purge
``similar.py``             a memory's nearest neighbours (the graph's ``similar`` edges)
``projection.py``          events → Postgres rows and vectors, once per sequence (kit's projector)
``index_follow.py``        a replica's own vector index, following the event log
``common.py``              what the handler families share (subjects, bounds)
``ports.py``               what the application needs from adapters: the event log, the read model
=========================  =====================================================================

Recall — the ranking pipeline — and how a memory becomes points in the vector index are the
search engine's (:mod:`services.memory.search`, with the ports of the index and the encoders),
which the application uses and which never uses the application.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from contracts.daily_logs import (
    DEFAULT_LOG_RETENTION_DAYS,
    ClaimDailyLog,
    DailyLogResult,
    DeleteLogs,
    GetDailyLog,
    GetExtractionResults,
    GetExtractionTasks,
    GetUnprocessedLogs,
    ListDailyLogs,
    MarkLogFailed,
    MarkLogProcessed,
    ReconcileLogStatuses,
    RecordExtractionResult,
    RecordExtractionTask,
    RecoverStuckLogs,
    SaveDailyLog,
    SaveDailyLogResult,
    UpdateLogStatus,
)
from contracts.envelope import CommandEnvelope, QueryEnvelope, Reply, utcnow
from contracts.graph import SimilarMemories
from contracts.memory import (
    ForgetMemory,
    GetMemory,
    GetMemoryByKey,
    GetProfile,
    GetSharedMemories,
    ListConflicts,
    ListProjects,
    MemoryHistoryQuery,
    MergeMemory,
    MoveMemory,
    PinMemory,
    Recall,
    RecallMemory,
    ReinstateExpired,
    SaveMemory,
    SaveSharedMemory,
    SettleConflict,
    UnmergeMemory,
    UpdateMemory,
)
from contracts.portability import ExportPage, PurgeMemoryUser, RestoreRecords
from contracts.subjects import Names
from kit.aggregates import WritePath
from kit.events import EventWriter, TypedEventLog
from kit.service import CommandCall, ServiceRuntime
from services.memory.application.daily_logs import DailyLogs
from services.memory.application.extraction import Extraction
from services.memory.application.memories import Memories, MemoryReads
from services.memory.application.ports import EventLog, Judge, ReadModel
from services.memory.application.projection import PROJECTOR, PROJECTOR_GRACE_S, MemoryProjection
from services.memory.application.shared import SharedMemories
from services.memory.application.similar import SimilarSearch
from services.memory.application.user_records import UserRecords, UserRecordsStore
from services.memory.domain import supersession
from services.memory.domain.decay import DecayPolicy
from services.memory.search.encoders import Encoders, forget_local_texts
from services.memory.search.late import LATE_CANDIDATES
from services.memory.search.ports import VectorIndex
from services.memory.search.recall import RecallPipeline

__all__ = ["PROJECTOR", "PROJECTOR_GRACE_S", "MemoryService"]


class MemoryService:
    """The memory service's application: its handler families, built over its ports."""

    def __init__(
        self,
        store: ReadModel,
        index: VectorIndex,
        encoders: Encoders,
        events: EventWriter,
        names: Names,
        *,
        clock: Callable[[], datetime] = utcnow,
        rerank_candidates: int = 30,
        late_candidates: int = LATE_CANDIDATES,
        keyword_feedback: bool = False,
        decay_policy: DecayPolicy | None = None,
        log_retention_days: int = DEFAULT_LOG_RETENTION_DAYS,
        portability: UserRecordsStore | None = None,
        judge: Judge | None = None,
    ) -> None:
        typed_events: EventLog = TypedEventLog(events)  # events read back reach the application typed (kit.events)
        self.encoders = encoders
        self.store = store
        self.projection = MemoryProjection(store, index, encoders)
        #: every command's write of an aggregate (kit.aggregates): appended, projected inline with its outcome
        writes = WritePath(typed_events, self.projection.project_inline, self.projection.inline)
        self.memories = Memories(store, index, encoders, typed_events, names, writes, clock, judge=judge)
        self.shared = SharedMemories(store, names, writes, clock)
        self.reads = MemoryReads(store, typed_events, names, self.projection)
        self.daily_logs = DailyLogs(store, typed_events, names, writes, clock, retention_days=log_retention_days)
        self.extraction = Extraction(store, typed_events, names, writes, clock)
        self.recall_pipeline = RecallPipeline(
            store, index, encoders, self.reads.cached_profile, rerank_candidates=rerank_candidates,
            late_candidates=late_candidates, keyword_feedback=keyword_feedback, clock=clock,
            versions=self.reads.versions, decay_policy=decay_policy,
        )
        self.recall = self.recall_pipeline.recall
        self.similar = SimilarSearch(store, index, self.projection)
        self.portability = UserRecords(portability, index, encoders, typed_events, names, self.projection, writes,
                                       self.forget_caches) if portability is not None else None

    def command_handlers(self) -> dict[type[BaseModel], Any]:
        return {SaveMemory: self.memories.save, UpdateMemory: self.memories.update,
                SettleConflict: self.memories.settle, PinMemory: self.memories.pin,
                UnmergeMemory: self.memories.unmerge, MergeMemory: self.memories.merge,
                MoveMemory: self.memories.move, ReinstateExpired: self.memories.reinstate_expired,
                ForgetMemory: self.memories.forget, SaveSharedMemory: self.shared.save,
                SaveDailyLog: self.save_daily_log, ClaimDailyLog: self.daily_logs.claim,
                MarkLogProcessed: self.mark_log_processed, MarkLogFailed: self.daily_logs.mark_failed,
                UpdateLogStatus: self.daily_logs.update_status, RecoverStuckLogs: self.daily_logs.recover_stuck,
                ReconcileLogStatuses: self.daily_logs.reconcile, DeleteLogs: self.daily_logs.delete,
                RecordExtractionTask: self.extraction.record_task,
                RecordExtractionResult: self.extraction.record_result,
                **({RestoreRecords: self.portability.restore, PurgeMemoryUser: self.portability.purge}
                   if self.portability else {})}

    def query_handlers(self) -> dict[type[BaseModel], Any]:
        return {Recall: self.recall_pipeline.recall_query, GetMemoryByKey: self.reads.get_by_key,
                RecallMemory: self.reads.list_memories, MemoryHistoryQuery: self.reads.history, GetMemory: self.reads.get,
                ListConflicts: self.reads.conflicts,
                GetSharedMemories: self.shared.list, ListProjects: self.reads.projects,
                GetProfile: self.reads.profile, GetUnprocessedLogs: self.daily_logs.unprocessed,
                GetDailyLog: self.daily_logs.get, ListDailyLogs: self.daily_logs.list_logs, GetExtractionTasks: self.extraction.list_tasks,
                GetExtractionResults: self.extraction.list_results, SimilarMemories: self.similar.similar,
                **({ExportPage: self.portability.export_page} if self.portability else {})}

    async def save_daily_log(self, call: CommandCall, cmd: SaveDailyLog) -> SaveDailyLogResult:
        """A day's log saved; when the save gives turns and the log was there already, the memories
        learnt only from turns it no longer holds are forgotten (``forgotten``): the outcome is
        recorded after them, so a save stopped half-way and sent again finishes."""
        result = await self.daily_logs.save(call, cmd, outcome=cmd.turns is None)
        if cmd.turns is None or result.created:
            return result
        log = await self.store.get_log(call.tenant, result.id)
        if log is None:
            return result
        gone = await self.memories.forget_unlearnt(call, log)
        return result.model_copy(update={"forgotten": [m.id for m in gone]}) if gone else result

    async def mark_log_processed(self, call: CommandCall, cmd: MarkLogProcessed) -> DailyLogResult:
        """A log marked processed; what its attempt learnt from turns that a save removed meanwhile
        (the attempt read the log as it was claimed) is forgotten now, as the save would have."""
        result = await self.daily_logs.mark_processed(call, cmd, outcome=False)
        log = await self.store.get_log(call.tenant, cmd.id)
        if log is not None and log.turns is not None:
            await self.memories.forget_unlearnt(call, log)
        return result

    def forget_caches(self, tenant: str) -> None:
        """Drop what this process holds of a purged user (cached profiles, content hints, and the
        vectors of every text: the user's replaced versions' texts cannot be told apart)."""
        profiles = self.reads._profiles
        for key in [k for k in profiles if k[0] == tenant]:
            profiles.pop(key, None)
        self.memories._absent_contents = {c for c in self.memories._absent_contents if c[0] != tenant}
        self.memories._content_written = {c: n for c, n in self.memories._content_written.items() if c[0] != tenant}
        self.projection.tenant_writes[tenant] += 1
        forget_local_texts(self.encoders)
        supersession.forget_texts()

    def bind(self, runtime: ServiceRuntime) -> None:
        """Attach kit's runtime built over :meth:`command_handlers` / :meth:`query_handlers`."""
        self.runtime = runtime

    @property
    def last_activity(self) -> float:
        """Event-loop time of the last command handled (reads do not count): kit's runtime notes it."""
        runtime = getattr(self, "runtime", None)
        return runtime.last_command if runtime is not None else 0.0

    async def handle_command(self, env: CommandEnvelope) -> Reply[Any]:
        """Run one command exactly once per (tenant, operation, idempotency key) (kit's skeleton)."""
        return await self.runtime.handle_command(env)

    async def handle_query(self, query: QueryEnvelope) -> Reply[Any]:
        return await self.runtime.handle_query(query)

    async def prime_commands(self, envs: Sequence[CommandEnvelope]) -> None:
        """Prepare a batch of commands as the consumer does (kit's skeleton, then ``prime_saves``)."""
        await self.runtime.prime([(("direct", i), env) for i, env in enumerate(envs)], self.memories.prime_saves)
