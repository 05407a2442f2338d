"""A task that failed and then succeeded reads ``success`` with no ``error`` (real JetStream and
Postgres, the memory service in-process): recorded so through its commands, and replayed so from
events written before the rule (a success that kept the failed attempt's error), while every other
state of an old history replays as written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contracts.daily_logs import (
    EXTRACTION_TASK_AGGREGATE,
    ExtractionTaskState,
    TaskStatus,
    extraction_task_uuid,
)
from contracts.envelope import QueryEnvelope
from services.memory.domain import daily_logs as rules
from services.memory.main import MemoryApp
from services.memory.replay import rebuild
from tests.integration import test_daily_logs

app = test_daily_logs.app  # the memory service in-process (its fixture), and its command helper
send = test_daily_logs.send

pytestmark = pytest.mark.integration
T0 = datetime(2025, 5, 1, 3, 0, tzinfo=UTC)


async def listed(app: MemoryApp, task_id: str) -> dict[str, Any]:
    """The task as get_extraction_tasks (MCP, REST, ``engram``) lists it: the read model."""
    reply = await app.service.handle_query(QueryEnvelope(type="get_extraction_tasks", tenant="alice",
                                                         payload={"task_id": task_id}))
    assert reply.ok, reply.error
    tasks = reply.result["tasks"]
    assert len(tasks) == 1
    return tasks[0]  # type: ignore[no-any-return]


async def record(app: MemoryApp, **payload: Any) -> dict[str, Any]:
    reply = await send(app, "record_extraction_task", payload)
    assert reply.ok, reply.error
    return reply.result["task"]  # type: ignore[no-any-return]


async def test_commands_fail_then_succeed_and_the_error_is_gone(app: MemoryApp) -> None:
    await record(app, task_id="run-1", status="running", engine="llm")
    failed = await record(app, task_id="run-1", status="failed", error="llm engine: endpoint down",
                          metrics={"retry_count": 1})
    assert failed["status"] == "failed" and failed["error"] == "llm engine: endpoint down"
    retry = await record(app, task_id="run-1", status="running")
    assert retry["error"] == "llm engine: endpoint down"  # a running retry still shows why the last try failed
    await record(app, task_id="run-1", status="success", metrics={"retry_count": 2, "facts": 3})
    task = await listed(app, "run-1")
    assert task["status"] == "success" and task["error"] is None and task["version"] == 4
    assert task["metrics"] == {"retry_count": 2, "facts": 3} and task["engine"] == "llm"

    reply = await send(app, "record_extraction_task", {"task_id": "run-1", "error": "afterthought"})
    # a valid request against a successful task's state: a conflict naming the field (409 over REST)
    assert not reply.ok and reply.error.code == "conflict" and reply.error.field == "error"
    reply = await send(app, "record_extraction_task", {"task_id": "run-2", "status": "success", "error": "partly"})
    assert not reply.ok and reply.error.code == "invalid_argument" and reply.error.field == "error"  # the contract's
    assert (await listed(app, "run-1")) == task  # nothing was written

    await rebuild(app)  # the new events replay to the same states
    assert (await listed(app, "run-1")) == task


async def test_an_old_history_replays_with_no_error_on_its_success(app: MemoryApp) -> None:
    """Events as the memory service wrote them before the rule: failed (error) → running (error
    kept) → success (error kept). Replayed, the success has no error; the failed task of another
    old history, and each earlier state, replay as written."""

    def state(task_id: str, version: int, status: TaskStatus, error: str | None) -> ExtractionTaskState:
        at = T0 + timedelta(minutes=version)
        # model_construct: the state as it was stored, past the contract's validation of today
        return ExtractionTaskState.model_construct(
            id=extraction_task_uuid("alice", task_id), tenant="alice", task_id=task_id, project="default",
            log_ids=[], status=status, engine="builtin", error=error, metrics={"retry_count": float(version)},
            version=version, created_at=T0, updated_at=at, started_at=T0,
            finished_at=at if status in (TaskStatus.SUCCESS, TaskStatus.FAILED) else None)

    histories = {
        "old-retried": [(TaskStatus.FAILED, "endpoint down"), (TaskStatus.RUNNING, "endpoint down"),
                        (TaskStatus.SUCCESS, "endpoint down")],
        "old-failed": [(TaskStatus.RUNNING, None), (TaskStatus.FAILED, "model gone")],
    }
    for task_id, steps in histories.items():
        seq = 0
        for version, (status, error) in enumerate(steps, start=1):
            event = rules.task_event(state(task_id, version, status, error), command_id=f"old-{task_id}-{version}",
                                     correlation_id="old")
            assert event.data["error"] == error  # the event holds the stale error
            subject = app.bus.names.event("alice", EXTRACTION_TASK_AGGREGATE,
                                          str(extraction_task_uuid("alice", task_id)))
            seq = await app.bus.append_event(subject, event, expected_last_seq=seq)

    await rebuild(app)
    retried = await listed(app, "old-retried")
    assert retried["status"] == "success" and retried["error"] is None
    assert retried["version"] == 3 and retried["metrics"] == {"retry_count": 3.0}
    failed = await listed(app, "old-failed")
    assert failed["status"] == "failed" and failed["error"] == "model gone" and failed["version"] == 2

    # the command path loads the old task from its events as replay does: recording it again changes nothing
    again = await send(app, "record_extraction_task", {"task_id": "old-retried", "status": "success"})
    assert again.ok and not again.result["updated"] and again.result["task"]["error"] is None
