"""Decay (services/memory/domain/decay.py): what fades in recall, what does not, pins and expiry."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from contracts.memory import Category
from services.memory.domain.decay import (
    DEFAULT_FLOOR,
    DecayPolicy,
    Family,
    family_of,
    importance_factor,
    in_recall,
    policy_from_settings,
    recency,
    weight,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 4, 12, 0)


def aged(days: float) -> datetime:
    return NOW - timedelta(days=days)


def test_every_category_engram_uses_has_a_family() -> None:
    assert {family_of(c) for c in Category} | {family_of(None)} <= set(Family)
    for lasting in (Category.USER_PROFILE, Category.PREFERENCE, Category.RELATIONSHIP, Category.PERSONALITY,
                    Category.SKILL, Category.CONVERSATION_STYLE):
        assert family_of(lasting) is Family.LASTING
    assert family_of(Category.EMOTIONAL_PATTERN) is Family.STATE
    assert family_of(Category.GOAL) is Family.PLAN
    assert family_of(None) is Family.NOTE


def test_lasting_facts_do_not_fade() -> None:
    fresh = weight(importance=4, category=Category.PREFERENCE, written_at=NOW, now=NOW,
                   content="I'm allergic to nuts")
    old = weight(importance=4, category=Category.PREFERENCE, written_at=aged(800), now=NOW,
                 content="I'm allergic to nuts")
    assert old == fresh


def test_a_passing_state_fades_by_its_half_life_and_ranks_below_a_lasting_fact() -> None:
    tired = dict(importance=3, category=Category.EMOTIONAL_PATTERN, now=NOW, content="I'm stressed about work")
    assert weight(written_at=NOW, **tired) == pytest.approx(1.0)
    assert weight(written_at=aged(30), **tired) == pytest.approx(0.5)
    assert weight(written_at=aged(60), **tired) == pytest.approx(0.25)
    allergy = weight(importance=3, category=Category.PREFERENCE, written_at=aged(60), now=NOW,
                     content="I'm allergic to nuts")
    assert allergy > weight(written_at=aged(60), **tired)


def test_a_sentence_about_a_moment_fades_in_a_week_whatever_its_category() -> None:
    assert family_of(Category.USER_PROFILE, "I'm tired today") is Family.MOMENT
    w = weight(importance=3, category=Category.USER_PROFILE, written_at=aged(7), now=NOW, content="I'm tired today")
    assert w == pytest.approx(0.5)


def test_fading_stops_at_the_floor_decay_reorders_it_does_not_forget() -> None:
    w = weight(importance=3, category=None, written_at=aged(10_000), now=NOW, content="parked on level 3")
    assert w == pytest.approx(DEFAULT_FLOOR)
    assert recency(-5, 30) == 1.0  # dated after now: counts as new


def test_importance_and_repetition_raise_the_weight() -> None:
    assert importance_factor(3) == 1.0
    assert importance_factor(5) > importance_factor(4) > importance_factor(3) > importance_factor(1)
    assert importance_factor(3, repeats=20) > importance_factor(3, repeats=2) > importance_factor(3)
    assert importance_factor(3, repeats=10**9) == pytest.approx(1.3)  # bounded
    with pytest.raises(ValueError, match="importance must be 1-5"):
        importance_factor(6)
    with pytest.raises(ValueError, match="repeats"):
        importance_factor(3, repeats=0)


def test_a_pinned_memory_never_fades() -> None:
    kwargs = dict(importance=3, category=Category.EMOTIONAL_PATTERN, written_at=aged(365), now=NOW,
                  content="I get anxious before flights")
    assert weight(pinned=True, **kwargs) == 1.0
    assert weight(**kwargs) == pytest.approx(DEFAULT_FLOOR)


def test_an_expired_memory_leaves_recall_even_pinned() -> None:
    expiry = NOW - timedelta(minutes=1)
    assert not in_recall(NOW, expiry)
    assert in_recall(NOW, NOW + timedelta(days=1)) and in_recall(NOW, None)
    assert weight(importance=5, category=Category.PREFERENCE, written_at=aged(1), now=NOW, pinned=True,
                  forget_after=expiry) == 0.0
    assert weight(importance=5, category=Category.PREFERENCE, written_at=aged(1), now=NOW,
                  forget_after=NOW + timedelta(hours=1)) > 0


def test_half_lives_are_configurable_per_category() -> None:
    policy = policy_from_settings({
        "ENGRAM_DECAY_HALF_LIFE_GOAL": "10",
        "ENGRAM_DECAY_HALF_LIFE_PREFERENCE": "365",
        "ENGRAM_DECAY_HALF_LIFE_EMOTIONAL_PATTERN": "never",
        "ENGRAM_DECAY_HALF_LIFE_UNCATEGORISED": "90",
        "ENGRAM_DECAY_HALF_LIFE_MOMENT": "2",
        "ENGRAM_OTHER": "ignored",
    })
    assert policy.half_life(Category.GOAL) == 10
    assert policy.half_life(Category.PREFERENCE) == 365
    assert policy.half_life(Category.EMOTIONAL_PATTERN) is None
    assert policy.half_life(None) == 90
    assert policy.half_life(Category.SKILL) is None  # not configured: the default (lasting)
    assert policy.half_life(Category.PREFERENCE, "I'm sleepy right now") == 2  # a moment stays a moment
    w = weight(importance=3, category=Category.GOAL, written_at=aged(10), now=NOW, policy=policy)
    assert w == pytest.approx(0.5)
    assert DecayPolicy().half_life(Category.GOAL) == 180


@pytest.mark.parametrize(("setting", "value", "message"), [
    ("ENGRAM_DECAY_HALF_LIFE_GOAL", "soon", "ENGRAM_DECAY_HALF_LIFE_GOAL must be a number of days or 'never'"),
    ("ENGRAM_DECAY_HALF_LIFE_GOAL", "0", "must be a positive number of days"),
    ("ENGRAM_DECAY_HALF_LIFE_GOAL", "-3", "must be a positive number of days"),
    ("ENGRAM_DECAY_HALF_LIFE_GOAL", "inf", "must be a positive number of days"),
    ("ENGRAM_DECAY_HALF_LIFE_HOBBY", "30", "no category 'HOBBY'"),
])
def test_a_bad_setting_is_refused_naming_it(setting: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        policy_from_settings({setting: value})


def test_recency_refuses_a_non_positive_half_life() -> None:
    with pytest.raises(ValueError, match="half_life_days must be positive"):
        recency(3, 0)
