"""Daily logs: save, the lifecycle (claim, processed, failed, status, recover, reconcile) and
retention, with the queries of logs.

Every command appends the log's next state to its subject on the event log through kit's write
path (:mod:`kit.aggregates`: optimistic concurrency on the last sequence it read), so of N
concurrent claimers exactly one appends and the others, reading again, find the log processing
(``claimed: false``). Each appended event is projected inline before the reply (read-your-writes),
the single-log commands recording their outcome in the projection's transaction (the batch
commands' outcome is recorded by kit's runtime after their last log). A command run again after a
crash recognises its own event (its causation id) as already written.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime, timedelta
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
    ListDailyLogs,
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
from kit.aggregates import Answer, Decide, Loaded, Write, WritePath
from kit.service import Call, CommandCall
from services.memory.application.ports import EventLog, ReadModel
from services.memory.domain import daily_logs as rules
from services.memory.domain import paging
from services.memory.domain.errors import NotFound

#: How many logs one recover, reconcile or delete call handles at most (call again for more).
BATCH_LIMIT = 1_000
#: list_daily_logs' page cursor: the last log's day and id (newest day first)
_LOG_PAGE = {"log_date": (date.fromisoformat, UUID)}

S = TypeVar("S", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)
#: (current state) -> next state, or None when nothing changes
Step = Callable[[S], "S | None"]


class Records(Generic[S]):
    """One kind of aggregate of the daily-log family on the event log: load its state, and change it
    through kit's write path (load, decide, append at the version loaded, project inline)."""

    def __init__(self, events: EventLog, names: Names, writes: WritePath, aggregate: str, model: type[S]) -> None:
        self.events = events
        self.names = names
        self.writes = writes
        self.aggregate = aggregate
        self.model = model

    def subject(self, tenant: str, record_id: UUID) -> str:
        return self.names.event(tenant, self.aggregate, str(record_id))

    async def load(self, tenant: str, record_id: UUID) -> tuple[S | None, int, str | None]:
        """(state or None, last sequence or 0, causation id of the last event)."""
        return self.loaded(await self.events.last_event(self.subject(tenant, record_id)))

    def loaded(self, loaded: Loaded) -> tuple[S | None, int, str | None]:
        """What a load gave, as (state or None, last sequence or 0, causation id of the last event)."""
        if loaded is None:
            return None, 0, None
        state = loaded[0].data  # (typed by kit.events: the aggregate's declared model)
        if not isinstance(state, self.model):
            raise TypeError(f"{self.aggregate} event {loaded[0].event_id} holds no {self.model.__name__}")
        return state, loaded[1], loaded[0].causation_id

    async def write(self, call: CommandCall, record_id: UUID, decide: Decide[R], *, outcome: bool = True) -> R:
        """Kit's write path on one record (``decide`` never declines it)."""
        reply = await self.writes.write(call, self.subject(call.tenant, record_id), decide, outcome=outcome,
                                        what=f"{self.aggregate} {record_id}")
        assert reply is not None
        return reply

    async def upsert(
        self, call: CommandCall, record_id: UUID, decide: Callable[[S | None], S | None],
        event_of: Callable[[S, bool], EventEnvelope], answer: Callable[[S, bool, bool], R], *,
        fresh: Callable[[S | None], bool] = lambda current: current is None, outcome: bool = True,
    ) -> R:
        """Create or change one record with a command, its outcome recorded with its projection.

        ``decide`` gives the next state (None: nothing changes), ``event_of(state, fresh)`` its
        event and ``answer(state, created, changed)`` the command's result. A command run again
        after a crash finds its own event and answers as it did."""

        def step(loaded: Loaded) -> Write[R] | Answer[R]:
            current, _, cause = self.loaded(loaded)
            if current is not None and cause == call.command_id:
                return Answer(answer(current, getattr(current, "version", 1) == 1, True))
            state = decide(current)
            if state is None:
                assert current is not None
                return Answer(answer(current, False, False))
            created = fresh(current)
            return Write(event_of(state, created), lambda stored: answer(stored.data, created, True))

        return await self.write(call, record_id, step, outcome=outcome)


class DailyLogs:
    """The commands and queries of daily logs."""

    def __init__(
        self, store: ReadModel, events: EventLog, names: Names, writes: WritePath,
        clock: Callable[[], datetime] = utcnow, retention_days: int = DEFAULT_LOG_RETENTION_DAYS,
    ) -> None:
        self.store = store
        self.logs: Records[DailyLogState] = Records(events, names, writes, DAILY_LOG_AGGREGATE, DailyLogState)
        self.clock = clock
        self.retention_days = retention_days

    # save ---------------------------------------------------------------------------------
    async def save(self, call: CommandCall, cmd: SaveDailyLog, *, outcome: bool = True) -> SaveDailyLogResult:
        """The day's log: created pending, or its fields updated (status untouched). ``outcome=False``:
        the caller has more to do before the command's outcome is recorded (kit's runtime)."""
        call.require_project(cmd.project)
        day = rules.log_date_of(cmd, self.clock())

        def event_of(state: DailyLogState, fresh: bool) -> EventEnvelope:
            return rules.log_event(state, DailyLogEventType.SAVED if fresh else DailyLogEventType.UPDATED,
                                   command_id=call.command_id, correlation_id=call.correlation_id)

        return await self.logs.upsert(
            call, daily_log_id(call.tenant, cmd.project, day),
            lambda current: rules.save(current, call.tenant, cmd, day, self.clock()), event_of, _saved,
            fresh=lambda current: current is None or current.deleted, outcome=outcome,
        )

    # the lifecycle ------------------------------------------------------------------------
    async def _step(
        self, call: CommandCall, log_id: UUID, step: Step[DailyLogState], event_type: DailyLogEventType,
        answer: Callable[[DailyLogState | None, bool], R], *, missing_ok: bool = False, outcome: bool = True,
    ) -> R:
        """Apply ``step`` to the log as the event log has it; the command answers
        ``answer(its state after, whether this command changed it)``. A log outside the caller's
        reach is not found (or, with ``missing_ok``, answered with None). ``outcome``: the answer is
        the command's result (recorded with the log's projection)."""

        def decide(loaded: Loaded) -> Write[R] | Answer[R]:
            current, seq, cause = self.logs.loaded(loaded)
            if current is None or current.deleted or not call.sees(current.project):
                if missing_ok:
                    return Answer(answer(None, False))
                raise NotFound(f"no daily log with id {log_id}", "id")
            if cause == call.command_id and seq > 0:
                return Answer(answer(current, True))  # written by this very command before (a retry after a crash)
            state = step(current)
            if state is None:
                return Answer(answer(current, False))
            event = rules.log_event(state, event_type, command_id=call.command_id, correlation_id=call.correlation_id)
            return Write(event, lambda stored: answer(stored.data, True))

        return await self.logs.write(call, log_id, decide, outcome=outcome)

    async def claim(self, call: CommandCall, cmd: ClaimDailyLog) -> ClaimResult:
        """Atomic claim: exactly one of many concurrent claimers wins (the event log's optimistic
        concurrency); the others answer ``claimed: false``."""

        def answer(state: DailyLogState | None, changed: bool) -> ClaimResult:
            assert state is not None
            if changed:
                return ClaimResult(claimed=True, log=rules.log_view(state), message="claimed: process it, then "
                                   "mark_log_processed (or mark_log_failed with the reason)")
            return ClaimResult(claimed=False, log=rules.log_view(state),
                               message="another worker holds this log (processing); pick another one")

        return await self._step(call, cmd.id, lambda s: rules.claim(s, self.clock()), DailyLogEventType.CLAIMED, answer)

    async def mark_processed(self, call: CommandCall, cmd: MarkLogProcessed, *, outcome: bool = True) -> DailyLogResult:
        return await self._single(call, cmd.id, lambda s: rules.mark_processed(s, self.clock()),
                                  DailyLogEventType.PROCESSED, outcome=outcome)

    async def mark_failed(self, call: CommandCall, cmd: MarkLogFailed) -> DailyLogResult:
        return await self._single(call, cmd.id, lambda s: rules.mark_failed(s, cmd.error_reason, self.clock()),
                                  DailyLogEventType.ATTEMPT_FAILED)

    async def update_status(self, call: CommandCall, cmd: UpdateLogStatus) -> DailyLogResult:
        return await self._single(
            call, cmd.id, lambda s: rules.change_status(s, cmd.processing_status, cmd.error_reason, self.clock()),
            DailyLogEventType.STATUS_CHANGED,
        )

    async def _single(
        self, call: CommandCall, log_id: UUID, step: Step[DailyLogState], event_type: DailyLogEventType, *,
        outcome: bool = True,
    ) -> DailyLogResult:
        return await self._step(call, log_id, step, event_type, _result, outcome=outcome)

    # batches ------------------------------------------------------------------------------
    async def _each(
        self, call: CommandCall, ids: list[UUID], step: Step[DailyLogState], event_type: DailyLogEventType,
    ) -> list[DailyLogState]:
        """Apply ``step`` to each log (re-checked on the event log: the read model only nominates);
        the command's result is recorded by kit's runtime once every log is done."""
        changed = []
        for log_id in ids:
            state, did = await self._step(call, log_id, step, event_type, _changed, missing_ok=True, outcome=False)
            if did and state is not None:
                changed.append(state)
        return changed

    async def recover_stuck(self, call: CommandCall, cmd: RecoverStuckLogs) -> LogBatchResult:
        """Logs stuck in processing longer than the timeout: back to pending, or failed at 3 tries."""
        project = call.search_project(cmd.project)
        timeout = timedelta(minutes=cmd.timeout_minutes)
        now = self.clock()
        ids = await self.store.stuck_log_ids(call.tenant, project, now - timeout, BATCH_LIMIT)
        changed = await self._each(call, ids, lambda s: rules.recover(s, self.clock(), timeout),
                                   DailyLogEventType.RECOVERED)
        failed = sum(1 for s in changed if s.processing_status is ProcessingStatus.FAILED)
        return LogBatchResult(count=len(changed), ids=[s.id for s in changed], requeued=len(changed) - failed,
                              failed=failed)

    async def reconcile(self, call: CommandCall, cmd: ReconcileLogStatuses) -> LogBatchResult:
        """Processed logs without any extraction result go back to pending."""
        project = call.search_project(cmd.project)
        ids = await self.store.unreconciled_log_ids(call.tenant, project, BATCH_LIMIT)
        changed = await self._each(call, ids, lambda s: rules.requeue(s, self.clock()), DailyLogEventType.REQUEUED)
        return LogBatchResult(count=len(changed), ids=[s.id for s in changed], requeued=len(changed))

    async def delete(self, call: CommandCall, cmd: DeleteLogs) -> LogBatchResult:
        """Processed logs last updated before the cut-off are deleted; failed ones are kept."""
        project = call.search_project(cmd.project)
        cutoff = rules.retention_cutoff(self.clock(), cmd.retention_days, cmd.older_than, self.retention_days)
        ids = await self.store.expired_log_ids(call.tenant, project, cutoff, BATCH_LIMIT)

        def step(state: DailyLogState) -> DailyLogState | None:
            return rules.delete(state, self.clock()) if rules.deletable(state, cutoff) else None

        changed = await self._each(call, ids, step, DailyLogEventType.DELETED)
        return LogBatchResult(count=len(changed), ids=[s.id for s in changed], cutoff=cutoff)

    # queries ------------------------------------------------------------------------------
    async def unprocessed(self, call: Call, q: GetUnprocessedLogs) -> DailyLogList:
        project = call.search_project(q.project)
        found = await self.store.waiting_logs(call.tenant, project, q.include_failed, q.limit)
        return DailyLogList(logs=rules.log_page(found)[0])  # (the oldest that fit; the rest on the next ask)

    async def list_logs(self, call: Call, q: ListDailyLogs) -> DailyLogList:
        """Logs of any status by day range, newest day first (the caller's project only)."""
        project = call.search_project(q.project)
        after = paging.decode(q.cursor, _LOG_PAGE, "log_date") if q.cursor is not None else None
        found = await self.store.logs(call.tenant, project, q.status.value if q.status else None, q.date_from,
                                      q.date_to, q.limit + 1, after=(after[0], after[1]) if after else None)
        logs, cut = rules.log_page(found[: q.limit])
        more = cut or len(found) > q.limit
        return DailyLogList(logs=logs, next_cursor=paging.encode("log_date", [logs[-1].log_date, logs[-1].id]) if more else None)

    async def get(self, call: Call, q: GetDailyLog) -> DailyLogLookup:
        state = await self.store.get_log(call.tenant, q.id)
        if state is None or not call.sees(state.project):
            return DailyLogLookup(found=False)
        return DailyLogLookup(found=True, log=rules.log_view(state))


def _result(state: DailyLogState | None, changed: bool) -> DailyLogResult:
    assert state is not None
    return DailyLogResult(changed=changed, log=rules.log_view(state))


def _changed(state: DailyLogState | None, changed: bool) -> tuple[DailyLogState | None, bool]:
    return state, changed


def _saved(state: DailyLogState, created: bool, changed: bool) -> SaveDailyLogResult:
    return SaveDailyLogResult(id=state.id, project=state.project, log_date=state.log_date,
                              processing_status=state.processing_status, version=state.version,
                              created=created, updated=changed and not created)
