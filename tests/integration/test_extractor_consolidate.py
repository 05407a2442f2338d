"""Near-duplicates learnt from logs, against the memory service in-process on real JetStream and
Postgres. The same thing said on two days in other words is one memory said twice as soon as the
second log is extracted (the memory service judges each extracted fact like a free-form save); the
consolidation schedule's round is the backstop for near-duplicates that judgement let through
(written before it, or by an extractor that did not judge them): merged into the later memory (one
more saying of it; the earlier forgotten, its history kept), what a client saved is never touched, and a second round, or
a replica running the same round, changes nothing."""

from __future__ import annotations

import pytest

from contracts.daily_logs import ProcessingStatus, Turn, UpdateLogStatus
from contracts.memory import Category, MemoryEventType, MemoryHistoryQuery, MemoryStatus, SaveMemory
from kit.client import Client
from services.extractor.adapters.memory_client import ClientMemoryWriter
from services.extractor.adapters.tenants import PgTenants
from services.extractor.application.extraction import consolidate
from tests.integration.test_extractor_pipeline import (
    Pipeline,
    memories,
    pipeline,  # noqa: F401  (the fixture)
    processed,
    save_log,
    until,
)

pytestmark = pytest.mark.integration


def said(text: str) -> list[Turn]:
    return [Turn(speaker="user", text="Hi! How are you?"), Turn(speaker="user", text=text)]


async def test_the_same_fact_in_other_words_in_two_logs_is_one_memory_said_twice(pipeline: Pipeline) -> None:  # noqa: F811
    p = pipeline
    await p.worker("a")
    logs = [await save_log(p, "ana", day, turns=said(text)) for day, text in (
        ("2025-06-01", "My parrot is called Ziggy."), ("2025-06-02", "I adopted a beagle named Biscuit."))]
    for log in logs:
        await until(lambda i=log.id: processed(p, "ana", i), f"log {log.id} processed")
    again = await save_log(p, "ana", "2025-06-09", turns=said("I have a parrot named Ziggy."))
    await until(lambda: processed(p, "ana", again.id), f"log {again.id} processed")

    held = (await memories(p, "ana")).memories
    assert sorted((m.content, m.repeats) for m in held) == [
        ("The user adopted a beagle named Biscuit.", 1), ("The user's parrot is called Ziggy.", 2)], held
    ziggy = next(m for m in held if "Ziggy" in m.content)
    history = await p.client.ask("ana", MemoryHistoryQuery(memory_id=ziggy.id))
    assert [(v.event, v.status) for v in history.versions] == [
        (MemoryEventType.SAVED, MemoryStatus.ACTIVE), (MemoryEventType.MERGED, MemoryStatus.ACTIVE)], history
    assert history.versions[-1].provenance is not None and history.versions[-1].provenance.log_id == logs[0].id

    # nothing left for the consolidation round; the same log extracted again adds no saying
    writer = ClientMemoryWriter(Client(p.bus, command_timeout_s=20))
    assert await consolidate(writer, PgTenants(p.pool, p.schema), round_id="consolidate-0") == 0
    await p.client.send("ana", UpdateLogStatus(id=again.id, processing_status=ProcessingStatus.PENDING),
                        key="x:requeue-again")
    await until(lambda: processed(p, "ana", again.id), f"log {again.id} processed again")
    assert {(m.id, m.repeats) for m in (await memories(p, "ana")).memories} == {(m.id, m.repeats) for m in held}


def extracted(content: str, key: str, importance: int = 3) -> SaveMemory:
    """A memory as the extractor writes it, without the log it came from: the memory service then
    saves it under its key without judging it a repeat (as an extractor before that judgement did)."""
    return SaveMemory(content=content, memory_key=key, category=Category.USER_PROFILE, source="extractor",
                      importance=importance)


async def test_near_duplicates_of_one_family_are_merged_into_the_latest(pipeline: Pipeline) -> None:  # noqa: F811
    p = pipeline
    await p.client.send("ana", extracted("The user went to the climbing gym with Leo.",
                                         "profile.user_went_climbing_gym_1a2b3c"), key="x:extracted-1")
    await p.client.send("ana", extracted("The user went to the climbing gym with Leo again.",
                                         "profile.user_went_climbing_gym_4d5e6f", 4), key="x:extracted-2")
    await p.worker("a")  # (the round visits the users with logs)
    beagle = await save_log(p, "ana", "2025-06-03", turns=said("I adopted a beagle named Biscuit."))
    await until(lambda: processed(p, "ana", beagle.id), f"log {beagle.id} processed")
    await p.client.send("ana", SaveMemory(content="The user goes to the climbing gym with Leo."), key="x:client-1")
    before = (await memories(p, "ana")).memories
    assert len(before) == 4  # the three extracted and the client's own

    writer = ClientMemoryWriter(Client(p.bus, command_timeout_s=20))
    tenants = PgTenants(p.pool, p.schema)
    assert await consolidate(writer, tenants, round_id="consolidate-1") == 1
    after = (await memories(p, "ana")).memories
    kept = sorted(m.content for m in after if m.source == "extractor")
    assert kept == ["The user adopted a beagle named Biscuit.", "The user went to the climbing gym with Leo again."]
    assert [m.content for m in after if m.source != "extractor"] == ["The user goes to the climbing gym with Leo."]

    # the earlier memory is a saying of the survivor now, and forgotten, not deleted: its history
    # says why, naming the survivor
    survivor = next(m for m in after if m.content.endswith("again."))
    assert survivor.repeats == 2, survivor
    kept = await p.client.ask("ana", MemoryHistoryQuery(memory_id=survivor.id))
    assert kept.versions[-1].event == MemoryEventType.MERGED, kept
    gone = next(m for m in before if m.source == "extractor" and m.content.endswith("with Leo."))
    history = await p.client.ask("ana", MemoryHistoryQuery(memory_id=gone.id))
    assert [v.status for v in history.versions] == [MemoryStatus.ACTIVE, MemoryStatus.FORGOTTEN]
    assert str(survivor.id) in (history.versions[-1].forget_reason or "")

    # the same round again (a replica) and the next round change nothing
    assert await consolidate(writer, tenants, round_id="consolidate-1") == 0
    assert await consolidate(writer, tenants, round_id="consolidate-2") == 0
    assert {(m.id, m.version) for m in (await memories(p, "ana")).memories} == {(m.id, m.version) for m in after}
