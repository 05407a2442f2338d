"""Kit's write path (kit/aggregates.py) as the memory service runs it: a command that changes one
aggregate has its outcome recorded in the transaction of its effect (the runtime records nothing
more), a command that changes several has it recorded by the runtime after the last, a retried
command answers its first outcome and writes nothing, and "a command was handled" is the
runtime's, not a handler's. Real NATS, Postgres, models (the memory service's own adapters)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from contracts.envelope import QueryEnvelope
from contracts.memory import MemoryHistoryQuery
from contracts.messages import scoped_command_id
from kit.command_log import OutcomeRecord
from kit.service import Call
from services.memory.config import MemorySettings
from services.memory.main import memory_app
from tests.integration.test_content_identity_and_purge import _cleanup, _rows, command, settings  # noqa: F401

pytestmark = pytest.mark.integration

A = "My sister lives in Osaka"


async def test_outcomes_are_kept_with_their_effect_and_activity_comes_from_the_runtime(
        settings: MemorySettings) -> None:  # noqa: F811
    try:
        async with memory_app(settings) as app:
            log = app.service.runtime.command_log
            by_runtime: list[str] = []
            record = log.record

            async def noting(outcome: OutcomeRecord, *args: Any) -> None:
                by_runtime.append(outcome.operation)
                await record(outcome, *args)

            log.record = noting  # type: ignore[method-assign]
            idle = app.service.last_activity

            save = command("save_memory", {"content": A})
            saved = await app.service.handle_command(save)
            assert saved.ok, saved.error
            assert app.service.last_activity > idle  # the runtime noted the command
            logged = await app.service.handle_command(command("save_daily_log", {"events": "Met Ana for tea"}))
            assert logged.ok, logged.error
            claimed = await app.service.handle_command(command("claim_daily_log", {"id": logged.result["id"]}))
            assert claimed.ok and claimed.result["claimed"], claimed
            assert by_runtime == []  # each kept in its projection's transaction
            stored = await log.find(scoped_command_id("alice", "save_memory", save.command_id))
            assert stored is not None and stored.reply.result == saved.result

            # a command that changes several aggregates (here none): its outcome, recorded by the runtime
            swept = await app.service.handle_command(command("recover_stuck_logs", {"timeout_minutes": 1}))
            assert swept.ok and swept.result["count"] == 0, swept
            assert by_runtime == ["recover_stuck_logs"]

            # the same command again: its first outcome, nothing written, nothing recorded again
            again = await app.service.handle_command(save)
            assert again.result == saved.result
            assert len(await _rows(app, A)) == 1
            assert by_runtime == ["recover_stuck_logs"]

            # a query is no activity
            before = app.service.last_activity
            found = await app.service.handle_query(QueryEnvelope(type="recall_memory", tenant="alice", payload={}))
            assert found.ok, found.error
            assert app.service.last_activity == before
    finally:
        await _cleanup(settings)


async def test_a_command_that_lost_the_race_decides_again_on_what_the_winner_wrote(
        settings: MemorySettings) -> None:  # noqa: F811
    """Two updates of one keyed memory read the same version; the second's append loses, so the
    write path loads the winner's version and decides again: both changes land, one version each."""
    try:
        async with memory_app(settings) as app:
            first = await app.service.handle_command(command("save_memory", {"content": "Tea: green", "category": "preference", "memory_key": "preference.tea"}))
            assert first.ok, first.error
            events = app.service.memories.writes.events
            last_event = events.last_event
            reads = 0

            async def stale_once(subject: str) -> Any:
                nonlocal reads
                found = await last_event(subject)
                reads += 1
                if reads == 1:  # the other writer lands between this read and the append
                    other = await app.service.handle_command(
                        command("update_memory", {"memory_key": "preference.tea", "content": "Tea: oolong"}))
                    assert other.ok and other.result["version"] == 2, other
                return found

            events.last_event = stale_once  # type: ignore[method-assign]
            try:
                mine = await app.service.handle_command(
                    command("update_memory", {"memory_key": "preference.tea", "content": "Tea: jasmine"}))
            finally:
                events.last_event = last_event  # type: ignore[method-assign]
            assert mine.ok and mine.result["version"] == 3 and mine.result["updated"], mine
            history = await app.service.reads.history(
                Call("alice", "test"), MemoryHistoryQuery(memory_id=uuid.UUID(mine.result["memory_id"])))
            assert [v.content for v in history.versions] == ["Tea: green", "Tea: oolong", "Tea: jasmine"]
    finally:
        await _cleanup(settings)


async def test_a_small_batch_is_prepared_beside_its_outcome_lookup_and_a_bulk_one_after_it(
        settings: MemorySettings) -> None:  # noqa: F811
    """A save or two waiting on a person is embedded while the command log is asked which commands
    already have an outcome (one round trip off its path); a bulk batch is prepared after that
    lookup and without the commands it found, so a redelivered import is not embedded again. A
    retried command prepared for nothing still answers its first outcome."""
    try:
        async with memory_app(settings) as app:
            runtime = app.service.runtime
            log, prime_saves = runtime.command_log, app.service.memories.prime_saves
            known_of = log.known
            seen: list[str] = []
            prepared: list[list[str]] = []

            async def known(ids: Any) -> set[str]:
                seen.append("lookup started")
                found = await known_of(ids)
                seen.append("lookup answered")
                return found

            async def prepare(batch: Any) -> None:
                seen.append("prepare started")
                prepared.append([call.key for call, _ in batch])
                await prime_saves(batch)

            log.known = known  # type: ignore[method-assign]
            first = command("save_memory", {"content": A})
            await runtime.prime([(("t", 0), first)], prepare)
            assert seen == ["lookup started", "prepare started", "lookup answered"]
            saved = await app.service.handle_command(first)
            assert saved.ok and saved.result["created"], saved

            # the same command again, alone: prepared for nothing, answered as the first time
            seen.clear()
            await runtime.prime([(("t", 1), first)], prepare)
            assert prepared[-1] == [first.command_id]
            assert (await app.service.handle_command(first)).result == saved.result
            assert len(await _rows(app, A)) == 1

            # a bulk batch (the retried command among new ones): prepared after the lookup, without it
            seen.clear()
            bulk = [first, *(command("save_memory", {"content": f"Bulk fact number {i}"}) for i in range(5))]
            await runtime.prime([(("t", 2 + i), env) for i, env in enumerate(bulk)], prepare)
            assert seen == ["lookup started", "lookup answered", "prepare started"]
            assert prepared[-1] == [env.command_id for env in bulk[1:]]
    finally:
        await _cleanup(settings)
