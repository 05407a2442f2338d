"""Slots per person and by date, against the memory service in-process on real JetStream and
Postgres: two people's jobs never share a key, and a log of an earlier day extracted after a later
one leaves the later value current (its fact is not written over it)."""

from __future__ import annotations

import pytest

from contracts.daily_logs import Turn
from contracts.memory import GetMemoryByKey, MemoryHistoryQuery, MemoryLookup
from tests.integration.test_extractor_pipeline import (
    Pipeline,
    pipeline,  # noqa: F401  (the fixture)
    processed,
    save_log,
    until,
)

pytestmark = pytest.mark.integration


def chat(caroline: str, melanie: str) -> list[Turn]:
    return [Turn(speaker="Caroline", text=caroline), Turn(speaker="Melanie", text=melanie)]


async def by_key(p: Pipeline, key: str) -> MemoryLookup:
    return await p.client.ask("ana", GetMemoryByKey(memory_key=key))  # type: ignore[no-any-return]


async def test_slots_are_per_person_and_the_latest_day_stays_current(pipeline: Pipeline) -> None:  # noqa: F811
    p = pipeline
    await p.worker("a")
    later = await save_log(p, "ana", "2025-06-02", turns=chat("I live in Paris now.", "I live in Boston."))
    await until(lambda: processed(p, "ana", later.id), "the later log processed")
    earlier = await save_log(p, "ana", "2025-06-01", turns=chat("I live in Lyon.", "I live in Denver."))
    await until(lambda: processed(p, "ana", earlier.id), "the earlier log processed")

    caroline = await by_key(p, "profile.caroline__location")
    melanie = await by_key(p, "profile.melanie__location")
    assert caroline.memory is not None and melanie.memory is not None
    assert caroline.memory.content == "Caroline lives in Paris now."  # the later day, extracted first, stays
    assert melanie.memory.content == "Melanie lives in Boston."
    assert caroline.memory.version == 1  # the older fact was not written over it
    assert caroline.memory.provenance is not None and str(caroline.memory.provenance.log_date) == "2025-06-02"
    assert not (await by_key(p, "profile.location")).found  # neither person is "the user"

    # in date order the later fact is a new version over the earlier one, its history kept
    third = await save_log(p, "ana", "2025-06-03", turns=chat("I moved to Nice.", "I live in Boston."))
    await until(lambda: processed(p, "ana", third.id), "the third log processed")
    now = await by_key(p, "profile.caroline__location")
    assert now.memory is not None and now.memory.content == "Caroline moved to Nice." and now.memory.version == 2
    history = await p.client.ask("ana", MemoryHistoryQuery(memory_id=now.memory.id))
    assert [v.content for v in history.versions] == ["Caroline lives in Paris now.", "Caroline moved to Nice."]
