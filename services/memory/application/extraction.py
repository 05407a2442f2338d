"""Extraction tasks (metadata of extraction runs) and extraction results (log → memories of one
task, unique per (log_id, task_id)), with their queries.

A result is an aggregate whose id is derived from (tenant, log_id, task_id): recording it again
appends a new version that replaces the lists (or nothing when they are the same), so a repeat
never duplicates, and nothing here ever deletes a memory.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from uuid import UUID

from contracts.daily_logs import (
    DAILY_LOG_AGGREGATE,
    EXTRACTION_RESULT_AGGREGATE,
    EXTRACTION_TASK_AGGREGATE,
    DailyLogState,
    ExtractionResultList,
    ExtractionResultState,
    ExtractionTaskList,
    ExtractionTaskState,
    GetExtractionResults,
    GetExtractionTasks,
    RecordExtractionResult,
    RecordExtractionResultResult,
    RecordExtractionTask,
    RecordExtractionTaskResult,
    extraction_result_id,
)
from contracts.envelope import utcnow
from contracts.subjects import Names
from kit.aggregates import WritePath
from kit.service import Call, CommandCall
from services.memory.application.daily_logs import Records
from services.memory.application.ports import EventLog, ReadModel
from services.memory.domain import daily_logs as rules
from services.memory.domain import paging
from services.memory.domain.errors import NotFound


class Extraction:
    """The commands and queries of extraction tasks and results."""

    def __init__(
        self, store: ReadModel, events: EventLog, names: Names, writes: WritePath,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.logs: Records[DailyLogState] = Records(events, names, writes, DAILY_LOG_AGGREGATE, DailyLogState)
        self.tasks: Records[ExtractionTaskState] = Records(
            events, names, writes, EXTRACTION_TASK_AGGREGATE, ExtractionTaskState)
        self.results: Records[ExtractionResultState] = Records(
            events, names, writes, EXTRACTION_RESULT_AGGREGATE, ExtractionResultState)
        self.clock = clock

    async def _visible_log(self, call: Call, log_id: UUID, field: str) -> DailyLogState:
        """The log as the event log has it; another user's, a deleted one or one outside the
        caller's project is not found."""
        state, _, _ = await self.logs.load(call.tenant, log_id)
        if state is None or state.deleted or not call.sees(state.project):
            raise NotFound(f"no daily log with id {log_id}", field)
        return state

    # tasks --------------------------------------------------------------------------------
    async def record_task(self, call: CommandCall, cmd: RecordExtractionTask) -> RecordExtractionTaskResult:
        """Record or update a task's metadata (never the extracted text)."""
        task_uuid, task_id = rules.task_identity(call.tenant, cmd, call.command_id)
        if cmd.project is not None:
            call.require_project(cmd.project)
        elif call.project_scope is not None:
            cmd = cmd.model_copy(update={"project": call.project_scope})
        for log_id in dict.fromkeys(cmd.log_ids or []):
            log = await self._visible_log(call, log_id, "log_ids")
            if cmd.project is not None and log.project != cmd.project:
                raise NotFound(f"daily log {log_id} is not in project {cmd.project!r}", "log_ids")
        current, _, _ = await self.tasks.load(call.tenant, task_uuid)
        if current is not None and (not call.sees(current.project) if current.project is not None
                                    else call.project_scope is not None):
            raise NotFound(f"no extraction task with id {task_uuid}", "id")

        def answer(state: ExtractionTaskState, created: bool, changed: bool) -> RecordExtractionTaskResult:
            return RecordExtractionTaskResult(task=rules.task_view(state), created=created,
                                              updated=changed and not created)

        return await self.tasks.upsert(
            call, task_uuid, lambda current: rules.record_task(current, call.tenant, task_id, task_uuid, cmd, self.clock()),
            lambda state, _: rules.task_event(state, command_id=call.command_id, correlation_id=call.correlation_id),
            answer,
        )

    async def list_tasks(self, call: Call, q: GetExtractionTasks) -> ExtractionTaskList:
        found = await self.store.tasks(call.tenant, call.project_scope, q.status.value if q.status else None,
                                       q.task_id, q.limit, log_id=q.log_id)
        shown, more = paging.fitting(found, rules.task_view)  # (the newest that fit)
        return ExtractionTaskList(tasks=shown, more=more or None)

    # results ------------------------------------------------------------------------------
    async def record_result(self, call: CommandCall, cmd: RecordExtractionResult) -> RecordExtractionResultResult:
        """Link a log to the memories a task produced: one result per (log_id, task_id), replaced
        on a repeat; the memories named must be the user's."""
        log = await self._visible_log(call, cmd.log_id, "log_id")
        await self._require_known(call, cmd)

        def answer(state: ExtractionResultState, created: bool, changed: bool) -> RecordExtractionResultResult:
            return RecordExtractionResultResult(result=rules.result_view(state), created=created,
                                                replaced=changed and not created)

        return await self.results.upsert(
            call, extraction_result_id(call.tenant, cmd.log_id, cmd.task_id),
            lambda current: rules.record_result(current, call.tenant, log.project, cmd, self.clock()),
            lambda state, _: rules.result_event(state, command_id=call.command_id, correlation_id=call.correlation_id),
            answer,
        )

    async def _require_known(self, call: Call, cmd: RecordExtractionResult) -> None:
        """Every memory and shared memory named is the caller's and within its reach: another
        user's, one of another project for a caller restricted to a project, and any shared memory
        for such a caller (shared memories are tenant-wide: :func:`.shared.tenant_wide`) is not
        found — the same answer as an id that names nothing, so nothing outside the scope is
        revealed to exist."""
        for kind, ids, field in (("memory", cmd.memory_ids, "memory_ids"),
                                 ("shared memory", cmd.shared_memory_ids, "shared_memory_ids")):
            if not ids:
                continue
            if kind == "shared memory" and call.project_scope is not None:
                known: set[UUID] = set()
            else:
                known = await self.store.existing_ids("memories" if kind == "memory" else "shared_memories",
                                                      call.tenant, ids)
            if kind == "memory" and call.project_scope is not None:
                known = await self._in_scope(call, known)
            missing = [i for i in ids if i not in known]
            if missing:
                more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
                raise NotFound(f"no {kind} with id {missing[0]}{more}", field)

    async def _in_scope(self, call: Call, ids: set[UUID]) -> set[UUID]:
        """Those of the tenant's memories ``ids`` that lie in the caller's project (the active ones
        in one query, any others one by one)."""
        views = await self.store.active_views(call.tenant, list(ids))
        found = {i for i, view in views.items() if call.sees(view.project)}
        for memory_id in ids - views.keys():
            state = await self.store.get(call.tenant, memory_id)
            if state is not None and call.sees(state.project):
                found.add(memory_id)
        return found

    async def list_results(self, call: Call, q: GetExtractionResults) -> ExtractionResultList:
        found = await self.store.results(call.tenant, call.project_scope, q.log_id, q.task_id, q.limit)
        shown, more = paging.fitting(found, rules.result_view)  # (the newest that fit)
        return ExtractionResultList(results=shown, more=more or None)
