"""Consolidation's plan, without I/O: near-duplicates of one key family merged into the latest."""

from __future__ import annotations

import uuid
from datetime import date

import pytest

from services.extractor.domain.consolidate import Held, family_of, plan

pytestmark = pytest.mark.unit


def held(content: str, key: str | None, day: int, importance: int = 3, project: str = "default") -> Held:
    return Held(uuid.uuid4(), project, key, content, importance, date(2025, 6, day))


def test_a_family_is_the_key_without_its_statement_digest() -> None:
    assert family_of("profile.ana_went_climbing_gym_3f2a9c") == "profile.ana_went_climbing_gym"
    assert family_of("profile.location") == "profile.location"
    assert family_of(None) is None


def test_near_duplicates_of_one_family_merge_into_the_latest() -> None:
    old = held("Ana went to the climbing gym with Leo.", "profile.ana_went_climbing_gym_aaaaaa", 1, importance=4)
    new = held("Ana went to the climbing gym with Leo again.", "profile.ana_went_climbing_gym_bbbbbb", 3)
    other = held("Ana went to the climbing gym to train for a competition in Lyon next spring.",
                 "profile.ana_went_climbing_gym_cccccc", 2)
    elsewhere = held("Ana went to the climbing gym with Leo.", "profile.ana_went_climbing_gym_dddddd", 2,
                     project="work")
    result = plan([old, new, other, elsewhere])
    assert [(m.memory.id, m.survivor.id) for m in result.merge] == [(old.id, new.id)]
    assert "profile.ana_went_climbing_gym_aaaaaa" in result.merge[0].reason


def test_memories_of_different_families_or_no_key_are_left_alone() -> None:
    a = held("Ana lives in Lyon.", "profile.location", 1)
    b = held("Ana lives in Lyon.", "profile.ana__location", 2)
    c = held("Ana lives in Lyon.", None, 3)
    assert not plan([a, b, c])


def test_a_plan_applied_leaves_nothing_to_merge() -> None:
    memories = [held(f"Ana went hiking at Mont Blanc{' again' * i}.", f"profile.ana_went_hiking_mont_{i:06x}", i + 1)
                for i in range(4)]
    first = plan(memories)
    assert len(first.merge) == 3 and {m.survivor.id for m in first.merge} == {memories[-1].id}
    gone = {m.memory.id for m in first.merge}
    assert not plan([m for m in memories if m.id not in gone])
