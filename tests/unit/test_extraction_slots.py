"""Slots per person and an order-independent merge: the current value of a slot is the one said last."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from contracts.memory import Category, memory_key_problem
from services.extractor.domain.engine import BuiltinEngine, turns_from_text
from services.extractor.domain.merge import Action, as_of, decide, person_keys
from services.extractor.domain.model import Fact

pytestmark = pytest.mark.unit


def fact(content: str, speaker: str = "Ana", key: str | None = "profile.location", refs: tuple[str, ...] = ("turn:3",),
         at: datetime | None = None) -> Fact:
    return Fact(content=content, category=Category.USER_PROFILE, importance=5, confidence=0.9, turn_refs=refs,
                speaker=speaker, memory_key=key, at=at)


def test_a_fact_is_dated_by_its_turn_then_by_its_log() -> None:
    assert as_of(fact("Ana lives in Lyon."), date(2025, 6, 2)) == (date(2025, 6, 2), 3)
    said = fact("Ana lives in Lyon.", at=datetime(2025, 6, 1, 23, 0, tzinfo=UTC))
    assert as_of(said, date(2025, 6, 2)) == (date(2025, 6, 1), 3)
    assert as_of(fact("Ana lives in Lyon.", refs=("field:events",)), date(2025, 6, 2)) == (date(2025, 6, 2), -1)


def test_an_older_fact_does_not_replace_a_newer_one_whatever_the_order() -> None:
    lyon, paris = fact("Ana lives in Lyon."), fact("Ana lives in Paris.")
    june1, june2 = (date(2025, 6, 1), 3), (date(2025, 6, 2), 0)
    # date order: Lyon (June 1) then Paris (June 2) → Paris is a new version
    assert decide(paris, lyon.content, june2, june1) is Action.UPDATE
    # reverse order: Paris first, then the older Lyon arrives → Paris stays current
    assert decide(lyon, paris.content, june1, june2) is Action.KEEP
    # the same day, a later turn wins; without dates the last written wins (as before)
    assert decide(paris, lyon.content, (date(2025, 6, 1), 7), june1) is Action.UPDATE
    assert decide(lyon, paris.content) is Action.UPDATE


def test_slots_are_per_person_when_several_people_speak() -> None:
    chat = "Caroline: I work as a counselor at the youth center.\nMelanie: I work as a teacher in Boston."
    turns = turns_from_text(chat)
    facts = person_keys(BuiltinEngine().extract(turns), [t.speaker for t in turns])
    keys = {f.speaker: f.memory_key for f in facts}
    assert keys == {"Caroline": "profile.caroline__occupation", "Melanie": "profile.melanie__occupation"}
    assert all(memory_key_problem(Category.USER_PROFILE, k) is None for k in keys.values())


def test_the_user_and_a_log_of_one_person_keep_the_plain_key() -> None:
    alone = person_keys([fact("Ana lives in Lyon.")], ["Ana", "assistant", "Ana"])
    assert alone[0].memory_key == "profile.location"
    user = person_keys([fact("The user lives in Lyon.", speaker="user")], ["user", "Ben"])
    assert user[0].memory_key == "profile.location"
    keyless = person_keys([fact("Ana went to Rome.", key=None)], ["Ana", "Ben"])
    assert keyless[0].memory_key is None


def test_a_long_name_still_gives_a_valid_key() -> None:
    long = person_keys([fact("x", speaker="Maximilian-Alexander von Habsburg-Lothringen the Third",
                            key="preference.favorite_" + "x" * 50)], ["Maximilian-Alexander von Habsburg-Lothringen the Third", "Ben"])
    assert memory_key_problem(Category.PREFERENCE, long[0].memory_key or "") is None
