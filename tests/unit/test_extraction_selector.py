"""The built-in engine's selector: every statement is a candidate, the informative ones are kept."""

from __future__ import annotations

import math

import pytest

from services.extractor.domain.engine import BuiltinEngine, EngineSettings, reported, turns_from_text
from services.extractor.domain.select import THRESHOLD, WEIGHTS, features, score, vector

pytestmark = pytest.mark.unit

CHAT = """Ana: Hey Ben! Great to see you.
Ben: Hi Ana! How was the weekend?
Ana: I went to a pottery workshop in Lyon on Saturday and made my first bowl. It was so much fun!
Ben: Wow, a pottery workshop! That sounds like a wonderful weekend.
Ana: My name is Ana Lopez."""


def test_a_statement_not_about_the_speaker_is_reported_as_said() -> None:
    assert reported("Boston's music scene is awesome!", "Dave", "Calvin") == "Dave says Boston's music scene is awesome."
    assert reported("The car is fixed and going strong.", "Dave", "Calvin") == "Dave says the car is fixed and going strong."
    assert reported("Your paintings of the sea are stunning", "Dave", "Calvin") == (
        "Dave says Calvin's paintings of the sea are stunning.")


@pytest.mark.parametrize("sentence", ["Is the car fixed?", "Wow, that's great!", "I love my car.", "It's cool."])
def test_questions_filler_first_person_and_near_empty_sentences_are_not_reported(sentence: str) -> None:
    assert reported(sentence, "Dave", "Calvin") is None


def test_you_is_not_reported_to_an_assistant() -> None:
    assert reported("Your answers are too long for my taste", "user", "assistant") is None


def test_the_informative_statement_is_kept_and_the_reaction_dropped() -> None:
    engine = BuiltinEngine()
    candidates = engine.candidates(turns_from_text(CHAT))
    kept = [f.content for f in engine.extract(turns_from_text(CHAT))]
    assert any(c.fact.content.startswith("Ben says") for c in candidates)  # the reaction was a candidate
    assert not any(text.startswith("Ben says") for text in kept)  # ... and is not kept
    assert kept[0].startswith("Ana went to a pottery workshop in Lyon on Saturday")


def test_a_slot_fact_is_kept_whatever_its_score() -> None:
    engine = BuiltinEngine(EngineSettings(threshold=math.inf))
    assert [f.content for f in engine.extract(turns_from_text(CHAT))] == ["Ana's name is Ana Lopez."]
    assert [f.memory_key for f in engine.extract(turns_from_text(CHAT))] == ["profile.name"]


def test_without_a_bar_every_candidate_is_kept_once() -> None:
    everything = BuiltinEngine(EngineSettings(threshold=-math.inf))
    turns = turns_from_text(CHAT)
    assert len(everything.extract(turns)) == len(everything.candidates(turns)) > len(BuiltinEngine().extract(turns))


def test_the_score_reads_the_features_it_names() -> None:
    assert len(vector(features("I went to Lyon", first=True, last=True, statements=1, turn_chars=14,
                                answers=False))) == len(WEIGHTS)
    event = features("I went to a pottery workshop in Lyon and made my first bowl", first=True, last=False,
                     statements=2, turn_chars=90, answers=True, after=frozenset({"pottery", "workshop"}))
    praise = features("That's so cool and amazing", first=False, last=True, statements=2, turn_chars=90,
                      answers=False)
    assert event.first_person and event.event and event.echoed_after == pytest.approx(2 / 7)
    assert praise.praise and praise.deictic and not praise.first_person
    assert score(event) >= THRESHOLD > score(praise)


def test_a_keyed_preference_is_kept_however_short() -> None:
    turns = turns_from_text("user: I moved to Berlin last month and I love the parks.\nassistant: Berlin has wonderful parks!")
    kept = BuiltinEngine().extract(turns)
    assert [(f.content, f.memory_key) for f in kept] == [
        ("The user moved to Berlin last month.", "profile.location"), ("The user loves the parks.", "preference.parks")]
