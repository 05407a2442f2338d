"""`engram reextract`'s entry (services.extractor.main.reextract) against the memory service
in-process on real JetStream and Postgres: logs extracted under task A by the pipeline, re-extracted
under task B → a result for B on every log, no duplicate memory, the logs' lifecycle untouched, and
a second run under B writes nothing."""

from __future__ import annotations

import uuid
from datetime import date

import pytest

from contracts.daily_logs import GetExtractionTasks, TaskStatus, Turn
from services.extractor.adapters.ledger import PgTaskLedger
from services.extractor.config import ExtractorSettings
from services.extractor.main import reextract
from tests.integration.test_extractor_pipeline import (
    TASK,
    Pipeline,
    memories,
    pipeline,  # noqa: F401  (the fixture)
    processed,
    results,
    save_log,
    until,
)

pytestmark = pytest.mark.integration
NEW_TASK = "builtin-v2"


async def test_reextract_records_results_for_the_new_task_once(pipeline: Pipeline, infra) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    p = pipeline
    await p.worker("a")
    saved: dict[str, list[uuid.UUID]] = {"alice": [], "bob": []}
    for tenant in saved:
        for day in range(1, 4):
            turns = [Turn(speaker="user", text=f"I visited museum number {day} in Porto."),
                     Turn(speaker="user", text=f"My {tenant} project {day} is called Heron{day}.")]
            saved[tenant].append((await save_log(p, tenant, f"2025-06-0{day}", turns=turns)).id)
    for tenant, ids in saved.items():
        for log_id in ids:
            await until(lambda t=tenant, i=log_id: processed(p, t, i), f"log {log_id} processed")
    before = {t: {(m.id, m.version, m.content) for m in (await memories(p, t)).memories} for t in saved}

    settings = ExtractorSettings(nats_url=p.bus_url, database_url=infra.database_url, namespace=p.names.namespace,
                                 extractor_schema=p.schema)
    seen: list[tuple[int, int]] = []
    report = await reextract(settings, NEW_TASK, on_progress=lambda d, t: seen.append((d, t)))
    assert report.logs == 6 and report.done == 6 and report.failed == 0 and report.already_done == 0
    assert report.saved == 0 and report.updated == 0 and report.kept == report.facts > 0  # same engine: nothing new
    assert seen[0] == (0, 6) and seen[-1] == (6, 6)

    for tenant, ids in saved.items():
        for log_id in ids:
            found = await results(p, tenant, log_id)
            by_task = {r.task_id: r for r in found.results}
            assert set(by_task) == {TASK, NEW_TASK}, found  # one result per (log_id, task_id)
            assert set(by_task[NEW_TASK].memory_ids) == set(by_task[TASK].memory_ids)
            still = await processed(p, tenant, log_id)  # the lifecycle is left alone
            assert still is not None and still.log is not None and still.log.retry_count == 0
        listed = (await memories(p, tenant)).memories
        contents = [m.content for m in listed]
        assert len(contents) == len(set(contents)), contents  # no duplicate memory
        assert {(m.id, m.version, m.content) for m in listed} == before[tenant]  # nothing rewritten

    # the run is recorded as a task of each user: success, its logs, engine and counts
    for tenant, ids in saved.items():
        listed = (await p.client.ask(tenant, GetExtractionTasks(task_id=NEW_TASK))).tasks
        assert len(listed) == 1, listed
        task = listed[0]
        assert task.status is TaskStatus.SUCCESS and task.engine == "builtin" and task.error is None
        assert set(task.log_ids) == set(ids)
        assert task.metrics["logs"] == 3 and task.metrics["done"] == 3 and task.metrics["failed"] == 0
        assert task.metrics["kept"] == task.metrics["facts"] > 0
        assert task.started_at is not None and task.finished_at is not None

    # a second run under the same task id writes nothing
    again = await reextract(settings, NEW_TASK)
    assert again.logs == 6 and again.already_done == 6 and again.done == 0 and again.facts == 0
    for tenant in saved:
        assert {(m.id, m.version, m.content) for m in (await memories(p, tenant)).memories} == before[tenant]
        for log_id in saved[tenant]:
            assert len((await results(p, tenant, log_id)).results) == 2
        task = (await p.client.ask(tenant, GetExtractionTasks(task_id=NEW_TASK))).tasks[0]
        assert task.status is TaskStatus.SUCCESS and task.metrics["already_done"] == 3  # the second run, recorded

    # --since and --user narrow the logs; a task id outside the pattern is refused
    narrow = await reextract(settings, "builtin-v3", since=date(2025, 6, 2), user="bob")
    assert narrow.logs == 2 and narrow.done == 2
    counts = await PgTaskLedger(p.pool, p.schema).counts()
    assert counts == {"done": 6 + 6 + 2}
    with pytest.raises(ValueError):
        await reextract(settings, "no spaces allowed")
    with pytest.raises(ValueError):
        await reextract(settings, "x", engine="nope")

