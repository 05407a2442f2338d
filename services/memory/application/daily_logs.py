"""Daily logs: save, the lifecycle (claim, processed, failed, status, recover, reconcile) and
retention, with the queries of logs.

Every command appends the log's next state to its subject on the event log with optimistic
concurrency (the last sequence it read), so of N concurrent claimers exactly one appends and the
others, reading again, find the log processing (``claimed: false``). Each appended event is
projected inline before the reply (read-your-writes), the single-log commands recording their
outcome in the projection's transaction. A command run again after a crash recognises its own
event (its causation id) as already written.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Generic, TypeVar
from uuid import UUID

from pydantic import BaseModel

from contracts.daily_logs import (
    DAILY_LOG_AGGREGATE,
    DEFAULT_LOG_RETENTION_DAYS,
    ClaimDailyLog,
    ClaimResult,
    DailyLogEventType,
    DailyLogList,
    DailyLogLookup,
    DailyLogResult,
    DailyLogState,
    DeleteLogs,
    GetDailyLog,
    GetUnprocessedLogs,
    LogBatchResult,
    MarkLogFailed,
    MarkLogProcessed,
    ProcessingStatus,
    ReconcileLogStatuses,
    RecoverStuckLogs,
    SaveDailyLog,
    SaveDailyLogResult,
    UpdateLogStatus,
    daily_log_id,
)
from contracts.envelope import EventEnvelope, utcnow
from contracts.subjects import Names
from kit.bus import ConcurrencyConflict
from kit.command_log import OutcomeRecord
from kit.service import Call, CommandCall
from services.memory.application.common import MAX_RACES, Activity
from services.memory.application.ports import EventLog, ReadModel
from services.memory.application.projection import MemoryProjection
from services.memory.domain import daily_logs as rules
from services.memory.domain.errors import NotFound

#: How many logs one recover, reconcile or delete call handles at most (call again for more).
BATCH_LIMIT = 1_000

S = TypeVar("S", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)
#: (current state) -> (next state or None when nothing changes, event type)
Step = Callable[[S], "S | None"]


class Records(Generic[S]):
    """One kind of aggregate of the daily-log family on the event log: load its state, append its
    next state (optimistic concurrency) and project it inline."""

    def __init__(self, events: EventLog, names: Names, projection: MemoryProjection, aggregate: str,
                 model: type[S]) -> None:
        self.events = events
        self.names = names
        self.projection = projection
        self.aggregate = aggregate
        self.model = model

    def subject(self, tenant: str, record_id: UUID) -> str:
        return self.names.event(tenant, self.aggregate, str(record_id))

    async def load(self, tenant: str, record_id: UUID) -> tuple[S | None, int, str | None]:
        """(state or None, last sequence or 0, causation id of the last event)."""
        loaded = await self.events.last_event(self.subject(tenant, record_id))
        if loaded is None:
            return None, 0, None
        state = loaded[0].data  # (typed by kit.events: the aggregate's declared model)
        if not isinstance(state, self.model):
            raise TypeError(f"{self.aggregate} event {loaded[0].event_id} holds no {self.model.__name__}")
        return state, loaded[1], loaded[0].causation_id

    async def append(
        self, tenant: str, record_id: UUID, event: EventEnvelope, expected: int, outcome: OutcomeRecord | None = None,
    ) -> int:
        """Append (ConcurrencyConflict when another writer came first) and project inline."""
        seq, event = await self.events.append_event_once(self.subject(tenant, record_id), event,
                                                         expected_last_seq=expected)
        await self.projection.apply_record(event, seq, outcome=outcome)
        return seq

    async def upsert(
        self, env: CommandCall, record_id: UUID, decide: Callable[[S | None], S | None],
        event_of: Callable[[S, bool], EventEnvelope], answer: Callable[[S, bool, bool], R], *,
        fresh: Callable[[S | None], bool] = lambda current: current is None,
    ) -> R:
        """Create or change one record with a command, its outcome recorded with its projection.

        ``decide`` gives the next state (None: nothing changes), ``event_of(state, fresh)`` its
        event and ``answer(state, created, changed)`` the command's result. A command run again
        after a crash finds its own event and answers as it did."""
        for _ in range(MAX_RACES):
            current, seq, cause = await self.load(env.tenant, record_id)
            if current is not None and cause == env.command_id:
                return answer(current, getattr(current, "version", 1) == 1, True)
            state = decide(current)
            if state is None:
                assert current is not None
                return answer(current, False, False)
            created = fresh(current)
            result = answer(state, created, True)
            try:
                await self.append(env.tenant, record_id, event_of(state, created), seq, env.outcome(result))
            except ConcurrencyConflict:
                continue
            env.recorded = True
            return result
        raise ConcurrencyConflict(f"{self.aggregate} {record_id} kept changing while being written; retry")


class DailyLogs:
    """The commands and queries of daily logs."""

    def __init__(
        self, store: ReadModel, events: EventLog, names: Names, projection: MemoryProjection, activity: Activity,
        clock: Callable[[], datetime] = utcnow, retention_days: int = DEFAULT_LOG_RETENTION_DAYS,
    ) -> None:
        self.store = store
        self.logs: Records[DailyLogState] = Records(events, names, projection, DAILY_LOG_AGGREGATE, DailyLogState)
        self.activity = activity
        self.clock = clock
        self.retention_days = retention_days

    # save ---------------------------------------------------------------------------------
    async def save(self, env: CommandCall, cmd: SaveDailyLog) -> SaveDailyLogResult:
        """The day's log: created pending, or its fields updated (status untouched)."""
        self.activity.touch()
        env.require_project(cmd.project)
        day = rules.log_date_of(cmd, self.clock())

        def event_of(state: DailyLogState, fresh: bool) -> EventEnvelope:
            return rules.log_event(state, DailyLogEventType.SAVED if fresh else DailyLogEventType.UPDATED,
                                   command_id=env.command_id, correlation_id=env.correlation_id)

        return await self.logs.upsert(
            env, daily_log_id(env.tenant, cmd.project, day),
            lambda current: rules.save(current, env.tenant, cmd, day, self.clock()), event_of, _saved,
            fresh=lambda current: current is None or current.deleted,
        )

    # the lifecycle ------------------------------------------------------------------------
    async def _step(
        self, call: CommandCall, log_id: UUID, step: Step[DailyLogState], event_type: DailyLogEventType,
        *, missing_ok: bool = False,
    ) -> tuple[DailyLogState | None, bool]:
        """Apply ``step`` to the log as the event log has it: (its state after, whether this command
        changed it). A log outside the caller's reach is not found (or, with ``missing_ok``, None)."""
        for _ in range(MAX_RACES):
            current, seq, cause = await self.logs.load(call.tenant, log_id)
            if current is None or current.deleted or not call.sees(current.project):
                if missing_ok:
                    return None, False
                raise NotFound(f"no daily log with id {log_id}", "id")
            if cause == call.command_id and seq > 0:
                return current, True  # written by this very command before (a retry after a crash)
            state = step(current)
            if state is None:
                return current, False
            event = rules.log_event(state, event_type, command_id=call.command_id, correlation_id=call.correlation_id)
            try:
                await self.logs.append(call.tenant, log_id, event, seq)
            except ConcurrencyConflict:
                continue
            return state, True
        raise ConcurrencyConflict(f"daily log {log_id} kept changing; retry")

    async def claim(self, env: CommandCall, cmd: ClaimDailyLog) -> ClaimResult:
        """Atomic claim: exactly one of many concurrent claimers wins (the event log's optimistic
        concurrency); the others answer ``claimed: false``."""
        self.activity.touch()
        state, changed = await self._step(env, cmd.id, lambda s: rules.claim(s, self.clock()),
                                          DailyLogEventType.CLAIMED)
        assert state is not None
        if changed:
            return ClaimResult(claimed=True, log=rules.log_view(state), message="claimed: process it, then "
                               "mark_log_processed (or mark_log_failed with the reason)")
        return ClaimResult(claimed=False, log=rules.log_view(state),
                           message="another worker holds this log (processing); pick another one")

    async def mark_processed(self, env: CommandCall, cmd: MarkLogProcessed) -> DailyLogResult:
        self.activity.touch()
        return await self._single(env, cmd.id, lambda s: rules.mark_processed(s, self.clock()),
                                  DailyLogEventType.PROCESSED)

    async def mark_failed(self, env: CommandCall, cmd: MarkLogFailed) -> DailyLogResult:
        self.activity.touch()
        return await self._single(env, cmd.id, lambda s: rules.mark_failed(s, cmd.error_reason, self.clock()),
                                  DailyLogEventType.ATTEMPT_FAILED)

    async def update_status(self, env: CommandCall, cmd: UpdateLogStatus) -> DailyLogResult:
        self.activity.touch()
        return await self._single(
            env, cmd.id, lambda s: rules.change_status(s, cmd.processing_status, cmd.error_reason, self.clock()),
            DailyLogEventType.STATUS_CHANGED,
        )

    async def _single(
        self, env: CommandCall, log_id: UUID, step: Step[DailyLogState], event_type: DailyLogEventType,
    ) -> DailyLogResult:
        state, changed = await self._step(env, log_id, step, event_type)
        assert state is not None
        return DailyLogResult(changed=changed, log=rules.log_view(state))

    # batches ------------------------------------------------------------------------------
    async def _each(
        self, env: CommandCall, ids: list[UUID], step: Step[DailyLogState], event_type: DailyLogEventType,
    ) -> list[DailyLogState]:
        """Apply ``step`` to each log (re-checked on the event log: the read model only nominates)."""
        changed = []
        for log_id in ids:
            state, did = await self._step(env, log_id, step, event_type, missing_ok=True)
            if did and state is not None:
                changed.append(state)
        return changed

    async def recover_stuck(self, env: CommandCall, cmd: RecoverStuckLogs) -> LogBatchResult:
        """Logs stuck in processing longer than the timeout: back to pending, or failed at 3 tries."""
        self.activity.touch()
        project = env.search_project(cmd.project)
        timeout = timedelta(minutes=cmd.timeout_minutes)
        now = self.clock()
        ids = await self.store.stuck_log_ids(env.tenant, project, now - timeout, BATCH_LIMIT)
        changed = await self._each(env, ids, lambda s: rules.recover(s, self.clock(), timeout),
                                   DailyLogEventType.RECOVERED)
        failed = sum(1 for s in changed if s.processing_status is ProcessingStatus.FAILED)
        return LogBatchResult(count=len(changed), ids=[s.id for s in changed], requeued=len(changed) - failed,
                              failed=failed)

    async def reconcile(self, env: CommandCall, cmd: ReconcileLogStatuses) -> LogBatchResult:
        """Processed logs without any extraction result go back to pending."""
        self.activity.touch()
        project = env.search_project(cmd.project)
        ids = await self.store.unreconciled_log_ids(env.tenant, project, BATCH_LIMIT)
        changed = await self._each(env, ids, lambda s: rules.requeue(s, self.clock()), DailyLogEventType.REQUEUED)
        return LogBatchResult(count=len(changed), ids=[s.id for s in changed], requeued=len(changed))

    async def delete(self, env: CommandCall, cmd: DeleteLogs) -> LogBatchResult:
        """Processed logs last updated before the cut-off are deleted; failed ones are kept."""
        self.activity.touch()
        project = env.search_project(cmd.project)
        cutoff = rules.retention_cutoff(self.clock(), cmd.retention_days, cmd.older_than, self.retention_days)
        ids = await self.store.expired_log_ids(env.tenant, project, cutoff, BATCH_LIMIT)

        def step(state: DailyLogState) -> DailyLogState | None:
            return rules.delete(state, self.clock()) if rules.deletable(state, cutoff) else None

        changed = await self._each(env, ids, step, DailyLogEventType.DELETED)
        return LogBatchResult(count=len(changed), ids=[s.id for s in changed], cutoff=cutoff)

    # queries ------------------------------------------------------------------------------
    async def unprocessed(self, call: Call, q: GetUnprocessedLogs) -> DailyLogList:
        project = call.search_project(q.project)
        found = await self.store.waiting_logs(call.tenant, project, q.include_failed, q.limit)
        return DailyLogList(logs=[rules.log_view(s) for s in found])

    async def get(self, call: Call, q: GetDailyLog) -> DailyLogLookup:
        state = await self.store.get_log(call.tenant, q.id)
        if state is None or not call.sees(state.project):
            return DailyLogLookup(found=False)
        return DailyLogLookup(found=True, log=rules.log_view(state))


def _saved(state: DailyLogState, created: bool, changed: bool) -> SaveDailyLogResult:
    return SaveDailyLogResult(id=state.id, project=state.project, log_date=state.log_date,
                              processing_status=state.processing_status, version=state.version,
                              created=created, updated=changed and not created)
