"""The consolidation schedule's round against the memory service in-process on real JetStream and
Postgres: the same thing extracted from two days' logs in other words is merged into the later
memory (the earlier forgotten, its history kept), what a client saved is never touched, and a
second round, or a replica running the same round, changes nothing."""

from __future__ import annotations

import pytest

from contracts.daily_logs import Turn
from contracts.memory import MemoryHistoryQuery, MemoryStatus, SaveMemory
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


async def test_near_duplicates_of_one_family_are_merged_into_the_latest(pipeline: Pipeline) -> None:  # noqa: F811
    p = pipeline
    await p.worker("a")
    first = await save_log(p, "ana", "2025-06-01", turns=said("I went to the climbing gym with Leo."))
    second = await save_log(p, "ana", "2025-06-02", turns=said("I went to the climbing gym with Leo again!"))
    other = await save_log(p, "ana", "2025-06-03", turns=said("I adopted a beagle named Biscuit."))
    for log in (first, second, other):
        await until(lambda i=log.id: processed(p, "ana", i), f"log {log.id} processed")
    await p.client.send("ana", SaveMemory(content="The user goes to the climbing gym with Leo."), key="x:client-1")
    before = (await memories(p, "ana")).memories
    assert len(before) == 4  # the three extracted and the client's own

    writer = ClientMemoryWriter(Client(p.bus, command_timeout_s=20))
    tenants = PgTenants(p.pool, p.schema)
    assert await consolidate(writer, tenants, round_id="consolidate-1") == 1
    after = (await memories(p, "ana")).memories
    extracted = sorted(m.content for m in after if m.source == "extractor")
    assert extracted == ["The user adopted a beagle named Biscuit.", "The user went to the climbing gym with Leo again."]
    assert [m.content for m in after if m.source != "extractor"] == ["The user goes to the climbing gym with Leo."]

    # the earlier memory is forgotten, not deleted: its history says why, naming the survivor
    survivor = next(m for m in after if m.content.endswith("again."))
    gone = next(m for m in before if m.source == "extractor" and m.content.endswith("with Leo."))
    history = await p.client.ask("ana", MemoryHistoryQuery(memory_id=gone.id))
    assert [v.status for v in history.versions] == [MemoryStatus.ACTIVE, MemoryStatus.FORGOTTEN]
    assert str(survivor.id) in (history.versions[-1].forget_reason or "")

    # the same round again (a replica) and the next round change nothing
    assert await consolidate(writer, tenants, round_id="consolidate-1") == 0
    assert await consolidate(writer, tenants, round_id="consolidate-2") == 0
    assert {(m.id, m.version) for m in (await memories(p, "ana")).memories} == {(m.id, m.version) for m in after}
