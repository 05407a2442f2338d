"""Daily logs on real JetStream and Postgres: claim races, the design's workflow tests
(idempotence, the failure path, result dedup, reconcile, retention), provenance and replay."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from contracts.daily_logs import turn_digest
from contracts.envelope import CommandEnvelope, QueryEnvelope, Reply
from services.memory.config import MemorySettings
from services.memory.main import MemoryApp, memory_app
from services.memory.replay import rebuild

pytestmark = pytest.mark.integration


@pytest.fixture
async def app(infra, tmp_path: Path) -> AsyncIterator[MemoryApp]:  # type: ignore[no-untyped-def]
    settings = MemorySettings(
        home=tmp_path, nats_url=infra.nats_url, database_url=infra.database_url,
        namespace=infra.fresh_namespace(), memory_schema="mem_" + uuid.uuid4().hex[:8],
        late_interaction="none", reranker="none",
    )
    async with memory_app(settings) as a:
        try:
            yield a
        finally:
            await a.bus.delete_streams()


async def send(app: MemoryApp, type_: str, payload: dict[str, Any], *, tenant: str = "alice",
               key: str | None = None, scope: str | None = None) -> Reply[Any]:
    return await app.service.handle_command(CommandEnvelope(
        command_id=key or uuid.uuid4().hex, type=type_, tenant=tenant, payload=payload, project_scope=scope))


async def ask(app: MemoryApp, type_: str, payload: dict[str, Any], *, tenant: str = "alice",
              scope: str | None = None) -> Reply[Any]:
    return await app.service.handle_query(QueryEnvelope(type=type_, tenant=tenant, payload=payload,
                                                       project_scope=scope))


async def ok(reply: Reply[Any] | Any) -> dict[str, Any]:
    r = await reply if asyncio.iscoroutine(reply) else reply
    assert r.ok, r.error
    return r.result  # type: ignore[no-any-return]


async def new_log(app: MemoryApp, day: str = "2025-03-01", **fields: Any) -> str:
    result = await ok(send(app, "save_daily_log", {"log_date": day, "events": "a day", **fields}))
    return str(result["id"])


async def test_claim_races_have_exactly_one_winner_each(app: MemoryApp) -> None:
    """1,000 claims: 100 logs, 10 concurrent claimers each (bounded for 2 shared cores), every
    race decided by JetStream's expected-last-subject-sequence: exactly one winner per log."""
    logs, claimers = 100, 10
    base = date(2024, 1, 1)
    ids = [await new_log(app, (base + timedelta(days=i)).isoformat()) for i in range(logs)]
    for batch in range(0, logs, 10):
        replies = await asyncio.gather(*(send(app, "claim_daily_log", {"id": log_id})
                                         for log_id in ids[batch:batch + 10] for _ in range(claimers)))
        assert all(r.ok for r in replies), [r.error for r in replies if not r.ok][:3]
        for i, log_id in enumerate(ids[batch:batch + 10]):
            mine = replies[i * claimers:(i + 1) * claimers]
            assert sum(r.result["claimed"] for r in mine) == 1, log_id
            assert all(r.result["log"]["retry_count"] == 1 for r in mine)
    for log_id in ids:
        found = await ok(ask(app, "get_daily_log", {"id": log_id}))
        assert found["log"]["processing_status"] == "processing" and found["log"]["retry_count"] == 1


async def test_save_is_one_log_per_day_and_queues_a_processed_log_again_only_for_new_content(app: MemoryApp) -> None:
    first = await ok(send(app, "save_daily_log", {"log_date": "2025-03-01", "events": "hike", "mood": 1}))
    assert first["created"] and first["processing_status"] == "pending"
    assert (await ok(send(app, "claim_daily_log", {"id": first["id"]})))["claimed"]
    await ok(send(app, "mark_log_processed", {"id": first["id"]}))
    again = await ok(send(app, "save_daily_log", {"log_date": "2025-03-01", "topics": ["tea"]}))
    assert again["id"] == first["id"] and again["updated"] and again["processing_status"] == "pending"
    assert (await ok(send(app, "claim_daily_log", {"id": first["id"]})))["claimed"]
    await ok(send(app, "mark_log_processed", {"id": first["id"]}))
    same = await ok(send(app, "save_daily_log", {"log_date": "2025-03-01", "topics": ["tea"]}))
    assert not same["created"] and not same["updated"] and same["processing_status"] == "processed"
    log = (await ok(ask(app, "get_daily_log", {"id": first["id"]})))["log"]
    assert log["events"] == "hike" and log["mood"] == 1 and log["topics"] == ["tea"]
    assert (await ok(ask(app, "get_unprocessed_logs", {})))["logs"] == []


async def test_bad_input_names_the_field_and_writes_nothing(app: MemoryApp) -> None:
    future = (datetime.now(UTC).date() + timedelta(days=2)).isoformat()
    for payload, field in (({"log_date": future}, "log_date"), ({"mood": 3}, "mood"),
                           ({"turns": [{"speaker": "u"}]}, "turns.0.text")):
        reply = await send(app, "save_daily_log", payload)
        assert not reply.ok and reply.error.field == field, reply.error
    log_id = await new_log(app)
    reply = await send(app, "update_log_status", {"id": log_id, "processing_status": "done"})
    assert not reply.ok and reply.error.field == "processing_status"
    reply = await send(app, "update_log_status", {"id": log_id, "processing_status": "processed"})
    assert not reply.ok and reply.error.code == "conflict" and reply.error.field == "processing_status"
    reply = await send(app, "record_extraction_result", {"log_id": str(uuid.uuid4()), "task_id": "t1"})
    assert not reply.ok and reply.error.code == "not_found" and reply.error.field == "log_id"
    reply = await send(app, "record_extraction_result", {"log_id": log_id, "task_id": "t1"}, tenant="bob")
    assert not reply.ok and reply.error.field == "log_id"  # another user's log
    await ok(send(app, "claim_daily_log", {"id": log_id}))
    await ok(send(app, "mark_log_processed", {"id": log_id}))
    reply = await send(app, "claim_daily_log", {"id": log_id})
    assert not reply.ok and reply.error.field == "id"  # claiming a processed log
    log = (await ok(ask(app, "get_daily_log", {"id": log_id})))["log"]
    assert log["version"] == 3


async def test_failure_path_ends_in_failed_after_three_tries(app: MemoryApp) -> None:
    log_id = await new_log(app)
    for attempt in range(1, 4):
        assert (await ok(send(app, "claim_daily_log", {"id": log_id})))["claimed"]
        after = await ok(send(app, "mark_log_failed", {"id": log_id, "error_reason": f"boom {attempt}"}))
        assert after["log"]["processing_status"] == ("failed" if attempt == 3 else "pending")
    waiting = (await ok(ask(app, "get_unprocessed_logs", {})))["logs"]
    assert [(w["id"], w["processing_status"], w["error_reason"]) for w in waiting] == [(log_id, "failed", "boom 3")]
    assert (await ok(ask(app, "get_unprocessed_logs", {"include_failed": False})))["logs"] == []
    reply = await send(app, "mark_log_processed", {"id": log_id})
    assert not reply.ok and reply.error.code == "conflict"


async def test_idempotent_workflow_commands_have_one_effect(app: MemoryApp) -> None:
    log_id = await new_log(app)
    claim = {"id": log_id}
    first = await ok(send(app, "claim_daily_log", claim, key="claim-key-0001"))
    second = await ok(send(app, "claim_daily_log", claim, key="claim-key-0001"))
    assert first == second and first["claimed"]  # the same key: the winner's answer again
    lost = await ok(send(app, "claim_daily_log", claim, key="claim-key-0002"))
    assert lost["claimed"] is False
    done = await ok(send(app, "mark_log_processed", {"id": log_id}))
    again = await ok(send(app, "mark_log_processed", {"id": log_id}))
    assert done["changed"] and not again["changed"] and again["log"]["version"] == done["log"]["version"]


async def test_result_dedup_reconcile_and_retention(app: MemoryApp) -> None:
    a, b, c = await new_log(app, "2025-01-01"), await new_log(app, "2025-01-02"), await new_log(app, "2025-01-03")
    memory = await ok(send(app, "save_memory", {"content": "likes sencha", "category": "preference",
                                                "memory_key": "preference.tea",
                                                "provenance": {"log_id": a, "task_id": "t1", "turns": []}}))
    for log_id in (a, b, c):
        await ok(send(app, "claim_daily_log", {"id": log_id}))
        await ok(send(app, "mark_log_processed", {"id": log_id}))
    rec = {"log_id": a, "task_id": "t1", "memory_ids": [memory["memory_id"]]}
    first = await ok(send(app, "record_extraction_result", rec))
    repeat = await ok(send(app, "record_extraction_result", rec))
    assert first["created"] and not repeat["created"] and not repeat["replaced"]
    replaced = await ok(send(app, "record_extraction_result", {**rec, "memory_ids": []}))
    assert replaced["replaced"] and replaced["result"]["id"] == first["result"]["id"]
    results = (await ok(ask(app, "get_extraction_results", {"log_id": a})))["results"]
    assert len(results) == 1 and results[0]["memory_ids"] == []
    assert (await ok(ask(app, "get_memory_by_key", {"memory_key": "preference.tea"})))["found"]  # never deleted
    reply = await send(app, "record_extraction_result", {**rec, "memory_ids": [str(uuid.uuid4())]})
    assert not reply.ok and reply.error.field == "memory_ids"

    reconciled = await ok(send(app, "reconcile_log_statuses", {}))
    assert sorted(map(str, reconciled["ids"])) == sorted([b, c])
    await ok(send(app, "claim_daily_log", {"id": b}))
    await ok(send(app, "mark_log_processed", {"id": b}))
    await ok(send(app, "claim_daily_log", {"id": c}))
    await ok(send(app, "mark_log_failed", {"id": c, "error_reason": "x"}))
    await ok(send(app, "update_log_status", {"id": c, "processing_status": "processing"}))
    await ok(send(app, "update_log_status", {"id": c, "processing_status": "failed", "error_reason": "y"}))

    future = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    nothing = await ok(send(app, "delete_logs", {}))  # default: 14 days; all are fresh
    assert nothing["count"] == 0
    deleted = await ok(send(app, "delete_logs", {"older_than": future}))
    assert sorted(map(str, deleted["ids"])) == sorted([a, b])  # failed c is kept
    assert not (await ok(ask(app, "get_daily_log", {"id": a})))["found"]
    assert (await ok(ask(app, "get_daily_log", {"id": c})))["log"]["processing_status"] == "failed"


async def test_recover_stuck_logs(app: MemoryApp) -> None:
    log_id = await new_log(app)
    await ok(send(app, "claim_daily_log", {"id": log_id}))
    assert (await ok(send(app, "recover_stuck_logs", {"timeout_minutes": 30})))["count"] == 0
    app.service.daily_logs.clock = lambda: datetime.now(UTC) + timedelta(minutes=31)
    recovered = await ok(send(app, "recover_stuck_logs", {}))
    assert recovered["count"] == 1 and recovered["requeued"] == 1
    log = (await ok(ask(app, "get_daily_log", {"id": log_id})))["log"]
    assert log["processing_status"] == "pending" and "stuck" in log["error_reason"]


async def test_tasks_scope_provenance_and_replay(app: MemoryApp) -> None:
    log_id = await new_log(app, turns="Alice: I love sencha\nBob: nice", project="work")
    task = await ok(send(app, "record_extraction_task", {"task_id": "nightly-1", "log_ids": [log_id],
                                                        "status": "running", "project": "work"}))
    assert task["created"] and task["task"]["started_at"]
    await ok(send(app, "record_extraction_task", {"task_id": "nightly-1", "status": "success"}))
    tasks = (await ok(ask(app, "get_extraction_tasks", {"status": "success"})))["tasks"]
    assert [t["task_id"] for t in tasks] == ["nightly-1"] and tasks[0]["version"] == 2
    # a caller restricted to another project sees neither the log nor the task
    assert not (await ok(ask(app, "get_daily_log", {"id": log_id}, scope="home")))["found"]
    assert (await ok(ask(app, "get_extraction_tasks", {}, scope="home")))["tasks"] == []
    reply = await send(app, "claim_daily_log", {"id": log_id}, scope="home")
    assert not reply.ok and reply.error.code == "not_found"
    reply = await send(app, "save_daily_log", {"project": "work"}, scope="home")
    assert not reply.ok and reply.error.code == "permission_denied"

    saved = await ok(send(app, "save_memory", {
        "project": "work", "content": "Alice loves sencha", "category": "preference", "memory_key": "preference.tea",
        "provenance": {"log_id": log_id, "task_id": "nightly-1", "turns": [0]}}))
    reply = await send(app, "save_memory", {"content": "x", "provenance": {"log_id": log_id, "task_id": "t",
                                                                           "turns": [5]}})
    assert not reply.ok and reply.error.field == "provenance.turns"
    found = (await ok(ask(app, "get_memory_by_key", {"project": "work", "memory_key": "preference.tea"})))["memory"]
    assert found["provenance"] == {"log_id": log_id, "task_id": "nightly-1", "turns": [0], "log_date": "2025-03-01",
                                   "turn_digests": [turn_digest("Alice", "I love sencha")]}
    history = (await ok(ask(app, "memory_history", {"memory_id": saved["memory_id"]})))["versions"]
    assert history[0]["provenance"]["log_id"] == log_id
    hits = (await ok(ask(app, "recall", {"query": "sencha", "project": "work"})))["hits"]
    assert hits[0]["memory"]["provenance"]["task_id"] == "nightly-1"

    before = (await ok(ask(app, "get_daily_log", {"id": log_id})))["log"]
    await rebuild(app)
    assert (await ok(ask(app, "get_daily_log", {"id": log_id})))["log"] == before
    assert (await ok(ask(app, "get_extraction_tasks", {"task_id": "nightly-1"})))["tasks"][0]["status"] == "success"


async def test_a_log_saved_without_some_turns_takes_what_was_learnt_only_from_them(app: MemoryApp) -> None:
    """A user removes a turn from the day's log ("forget I told you my PIN"): the memory learnt only
    from it is forgotten with the save, and says why. What another turn still says, what was said
    elsewhere too, and what a person touched since stay; the turns' order does not matter; another
    user is untouched; the save sent again (same key, or a new one) forgets nothing twice; and a
    memory that had superseded another brings it back."""
    day = "2025-04-02"
    turns = ["user: I adopted a cat named Luna", "user: my bank PIN is 4321", "user: I work at Acme now",
             "user: I live in Porto now"]
    log_id = await new_log(app, day, turns="\n".join(turns))
    other_log = await new_log(app, "2025-04-01", turns="user: my bank PIN is 4321\nuser: I live in Lisbon")
    lisbon = await ok(send(app, "save_memory", {"content": "The user lives in Lisbon", "provenance": {
        "log_id": other_log, "task_id": "agent-1", "turns": [1]}}))  # said the day before

    async def learnt(content: str, turn_ids: list[int], log: str = log_id, tenant: str = "alice") -> str:
        saved = await ok(send(app, "save_memory", {"content": content, "provenance": {
            "log_id": log, "task_id": "agent-1", "turns": turn_ids}}, tenant=tenant))
        return saved["memory_id"]  # type: ignore[no-any-return]

    pin = await learnt("The user's bank PIN is 4321", [1])
    luna = await learnt("The user has a cat named Luna", [0])
    acme = await learnt("The user works at Acme; the PIN was mentioned too", [1, 2])
    pinned = await learnt("The user has a bank PIN", [1])
    await ok(send(app, "pin_memory", {"memory_id": pinned, "pinned": True}))
    twice = await learnt("The user keeps the PIN 4321 for the bank", [1])
    await ok(send(app, "save_memory", {"content": "The user keeps the PIN 4321 for the bank", "provenance": {
        "log_id": other_log, "task_id": "agent-1", "turns": [0]}}))  # said in another log too
    porto = await learnt("The user lives in Porto", [3])
    assert (await ok(ask(app, "get_memory", {"memory_id": lisbon["memory_id"]})))["status"] == "superseded"

    key = uuid.uuid4().hex
    kept_turns = [turns[2], turns[0]]  # the PIN and Porto removed, the rest reordered
    saved = await ok(send(app, "save_daily_log", {"log_date": day, "turns": "\n".join(kept_turns)}, key=key))
    assert saved["updated"] and sorted(saved["forgotten"]) == sorted([pin, porto]), saved

    async def status(memory_id: str) -> str:
        return (await ok(ask(app, "get_memory", {"memory_id": memory_id})))["status"]  # type: ignore[no-any-return]

    assert [await status(m) for m in (pin, porto)] == ["forgotten", "forgotten"]
    assert [await status(m) for m in (luna, acme, pinned, twice)] == ["active"] * 4
    assert await status(lisbon["memory_id"]) == "active"  # Porto's turn gone: Lisbon stands again
    history = (await ok(ask(app, "memory_history", {"memory_id": pin})))["versions"]
    assert history[-1]["forget_reason"] == f"learnt only from turns removed from the daily log of {day}"
    again = await ok(send(app, "save_daily_log", {"log_date": day, "turns": "\n".join(kept_turns)}, key=key))
    assert again == saved  # the same key: the same answer
    fresh = await ok(send(app, "save_daily_log", {"log_date": day, "turns": "\n".join(kept_turns)}))
    assert not fresh["updated"] and "forgotten" not in fresh
    shuffled = await ok(send(app, "save_daily_log", {"log_date": day, "turns": "\n".join(kept_turns[::-1])}))
    assert shuffled["updated"] and "forgotten" not in shuffled


async def test_a_log_saved_without_some_turns_leaves_another_users_memories(app: MemoryApp) -> None:
    """The same log date and turns for two users: Bob's edit forgets only what Bob's log taught."""
    day, turns = "2025-04-03", "user: my bank PIN is 4321\nuser: I like tea"
    memories = {}
    for tenant in ("alice", "bob"):
        log = (await ok(send(app, "save_daily_log", {"log_date": day, "turns": turns}, tenant=tenant)))["id"]
        memories[tenant] = (await ok(send(app, "save_memory", {"content": "The user's bank PIN is 4321", "provenance": {
            "log_id": log, "task_id": "agent-1", "turns": [0]}}, tenant=tenant)))["memory_id"]
    saved = await ok(send(app, "save_daily_log", {"log_date": day, "turns": "user: I like tea"}, tenant="bob"))
    assert saved["forgotten"] == [memories["bob"]]
    alice = await ok(ask(app, "get_memory", {"memory_id": memories["alice"]}))
    assert alice["status"] == "active"


async def test_a_turn_removed_while_the_log_is_extracted_is_unlearnt_when_the_attempt_ends(app: MemoryApp) -> None:
    """The log is saved again without a turn while an extraction attempt holds it; the attempt, which
    read the log as claimed, then writes a memory from that turn (its provenance naming the turn's
    digest, as the extractor sends it). Marking the attempt processed forgets it."""
    day = "2025-04-04"
    turns = ["user: my bank PIN is 4321", "user: I like tea"]
    log_id = await new_log(app, day, turns="\n".join(turns))
    assert (await ok(send(app, "claim_daily_log", {"id": log_id})))["claimed"]
    resaved = await ok(send(app, "save_daily_log", {"log_date": day, "turns": turns[1]}))
    assert "forgotten" not in resaved  # nothing learnt yet
    pin = (await ok(send(app, "save_memory", {"content": "The user's bank PIN is 4321", "provenance": {
        "log_id": log_id, "task_id": "pipeline", "turns": [0],
        "turn_digests": [turn_digest("user", "my bank PIN is 4321")]}})))["memory_id"]
    tea = (await ok(send(app, "save_memory", {"content": "The user likes tea", "provenance": {
        "log_id": log_id, "task_id": "pipeline", "turns": [0], "turn_digests": [turn_digest("user", "I like tea")]}})))
    await ok(send(app, "mark_log_processed", {"id": log_id}))
    assert (await ok(ask(app, "get_memory", {"memory_id": pin})))["status"] == "forgotten"
    assert (await ok(ask(app, "get_memory", {"memory_id": tea["memory_id"]})))["status"] == "active"
