"""The built-in extraction engine's rules, without I/O."""

from __future__ import annotations

import pytest

from contracts.memory import Category, memory_key_problem
from services.extractor.domain import text
from services.extractor.domain.classify import classify
from services.extractor.domain.engine import (
    BuiltinEngine,
    clauses,
    display_name,
    split_turns,
    statement_of,
    style_request,
    subjectless,
    turns_from_fields,
    turns_from_text,
)
from services.extractor.domain.merge import Action, decide, fact_key, memory_key_of, step_key
from services.extractor.domain.model import Fact, Turn

pytestmark = pytest.mark.unit


def extract(chat: str) -> list[Fact]:
    return BuiltinEngine().extract(turns_from_text(chat))


# sentences, filler, questions --------------------------------------------------------------------
def test_sentences_split_on_end_punctuation_lines_and_dashes() -> None:
    assert text.sentences("I love tea. Do you? Yes!\nNew line - and a dash") == [
        "I love tea.", "Do you?", "Yes!", "New line", "and a dash"]


def test_abbreviations_do_not_end_a_sentence() -> None:
    assert text.sentences("I met Dr. Smith today. Nice.") == ["I met Dr. Smith today.", "Nice."]


@pytest.mark.parametrize("sentence", ["Hey Mel!", "Thanks!", "Wow, that's great!", "Good luck!", "Haha",
                                      "Sounds good", "Congrats, Jon!", "See you"])
def test_greetings_thanks_and_reactions_are_filler(sentence: str) -> None:
    assert text.is_filler(sentence)
    assert statement_of(sentence, "Ana", "Ben") is None


def test_a_sentence_with_content_is_not_filler() -> None:
    assert not text.is_filler("Thanks, I finally finished my thesis on river ecology.")


def test_questions_state_nothing() -> None:
    assert statement_of("Do I like my new job?", "Ana", "Ben") is None


def test_leading_interjections_and_vocatives_are_stripped() -> None:
    assert text.strip_interjections("Yeah, good flooring's crucial") == "Good flooring's crucial"
    assert text.strip_interjections("Oh wow, Jon, I did it, Gina!") == "I did it."
    assert text.strip_interjections("Jon, I did it") == "I did it"


def test_empty_statements_about_listening_are_dropped() -> None:
    assert statement_of("I know what you mean.", "Ana", "Ben") is None
    assert statement_of("I'm so happy for you!", "Ana", "Ben") is None


def test_a_statement_about_the_listener_only_is_dropped() -> None:
    assert statement_of("Your store looks great.", "Ana", "Ben") is None


# first person → the speaker ----------------------------------------------------------------------
@pytest.mark.parametrize(("said", "expected"), [
    ("I love my dog.", "Ana loves their dog."),
    ("I'm a nurse.", "Ana is a nurse."),
    ("I've been to Rome.", "Ana has been to Rome."),
    ("I don't eat meat.", "Ana doesn't eat meat."),
    ("I really enjoy pottery.", "Ana really enjoys pottery."),
    ("I went hiking with my brother.", "Ana went hiking with their brother."),
    ("I watch films and I try new recipes.", "Ana watches films and they try new recipes."),  # named once
    ("I was tired but I'm fine and I don't mind.", "Ana was tired but they are fine and they don't mind."),
    ("I got ideas from people I know.", "Ana got ideas from people they know."),
    ("We adopted a cat.", "Ana and others adopted a cat."),
    ("My mom taught me to paint.", "Ana's mom taught them to paint."),
])
def test_first_person_is_resolved_to_the_speaker(said: str, expected: str) -> None:
    assert text.resolve_first_person(said, "Ana") == expected


@pytest.mark.parametrize(("verb", "third"), [("love", "loves"), ("try", "tries"), ("watch", "watches"),
                                             ("go", "goes"), ("have", "has"), ("play", "plays"),
                                             ("went", "went"), ("could", "could"), ("started", "started")])
def test_verbs_agree_with_the_third_person(verb: str, third: str) -> None:
    assert text.third_person(verb) == third


def test_you_is_resolved_to_the_listener() -> None:
    assert statement_of("I'm proud of you.", "Ana", "Ben") == "Ana is proud of Ben."


def test_you_towards_an_assistant_drops_the_statement() -> None:
    assert statement_of("I told you about my cat.", "user", "assistant") is None


def test_subjectless_reports_get_their_speaker() -> None:
    assert subjectless("Been only to Rome once", "Gina") == "Gina has been only to Rome once"
    assert subjectless("Just got back from Peru", "Gina") == "Gina just got back from Peru"
    assert subjectless("Working on a new song", "Gina") == "Gina is working on a new song"
    assert statement_of("Been only to Rome once.", "Gina", "Jon") == "Gina has been only to Rome once."


def test_the_user_is_named_the_user() -> None:
    assert display_name("user") == "The user"
    assert display_name("caroline") == "Caroline"
    assert statement_of("I live in Oslo and I love it.", "user", "assistant") == \
        "The user lives in Oslo and they love it."


def test_a_sentence_that_goes_on_names_the_speaker_no_more() -> None:
    assert text.resolve_first_person("It made me think how much work we have to do.", "Ana", mentioned=True) == \
        "It made them think how much work they have to do."


def test_intensifiers_are_dropped_from_a_fact() -> None:
    assert text.without_fluff("Ana is super excited and definitely going to Rome.") == \
        "Ana is excited and going to Rome."
    assert text.without_fluff("Ana actually, loves it.") == "Ana loves it."
    assert text.without_fluff("Ana bought a super.") == "Ana bought a super."  # a noun stays


def test_discourse_openers_are_stripped_and_double_dashes_end_a_sentence() -> None:
    assert text.strip_interjections("On a different note, I got a job.") == "I got a job."
    assert text.strip_interjections("Speaking of which, I started pottery.") == "I started pottery."
    assert text.sentences("Big news--I'm exploring endorsements.") == ["Big news", "I'm exploring endorsements."]
    assert statement_of("Anyway, I'm super excited about my new job!", "Ana", "Ben") == \
        "Ana is super excited about their new job."
    facts = extract("Ana: On a side note, I'm super excited about my new job!")
    assert [f.content for f in facts] == ["Ana is excited about their new job."]


def test_a_sentence_is_cut_where_a_new_first_person_clause_begins() -> None:
    assert clauses("I live in Lyon and I work as a nurse") == ["I live in Lyon", "I work as a nurse"]
    assert clauses("I like tea and coffee") == ["I like tea and coffee"]


def test_style_requests_to_an_assistant_become_style_facts() -> None:
    assert style_request("Please keep your answers short.", "user", "assistant") == \
        "The user asked the assistant to keep the assistant's answers short."
    assert style_request("Please keep your answers short.", "Ana", "Ben") is None
    facts = extract("assistant: Hello.\nuser: Please keep your answers short.")
    assert [f.category for f in facts] == [Category.CONVERSATION_STYLE]


# classification ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("said", "category", "key"), [
    ("My name is Ana", Category.USER_PROFILE, "profile.name"),
    ("I'm 34 years old", Category.USER_PROFILE, "profile.age"),
    ("I live in Lyon", Category.USER_PROFILE, "profile.location"),
    ("I'm from Brazil", Category.USER_PROFILE, "profile.hometown"),
    ("I work as a nurse", Category.USER_PROFILE, "profile.occupation"),
    ("My favorite color is green", Category.PREFERENCE, "preference.favorite_color"),
    ("I'm vegetarian", Category.PREFERENCE, "preference.diet"),
    ("I love hiking", Category.PREFERENCE, "preference.hiking"),
    ("I want to run a marathon", Category.GOAL, "goal.run_marathon"),
    ("I'm learning Spanish", Category.SKILL, "skill.spanish"),
    ("I'm an introvert", Category.PERSONALITY, "personality.introvert"),
    ("My sister's name is Anna", Category.RELATIONSHIP, "relationship.sister_name"),
    ("Please keep your answers short", Category.CONVERSATION_STYLE, "style.answer_length"),
    ("I prefer concise answers", Category.CONVERSATION_STYLE, "style.answer_length"),
])
def test_slots_get_their_category_and_key(said: str, category: Category, key: str) -> None:
    kind = classify(said)
    assert kind.category is category
    assert kind.memory_key == key
    assert memory_key_problem(kind.category, key) is None


@pytest.mark.parametrize(("said", "category"), [
    ("My brother visited last week", Category.RELATIONSHIP),
    ("I always plan everything ahead", Category.PERSONALITY),
    ("I feel anxious before exams", Category.EMOTIONAL_PATTERN),
    ("I went to a support group yesterday", Category.USER_PROFILE),
])
def test_other_statements_are_classified_without_a_slot(said: str, category: Category) -> None:
    kind = classify(said)
    assert kind.category is category
    assert kind.memory_key is None


def test_importance_rises_for_strong_or_lasting_statements_and_falls_for_passing_ones() -> None:
    assert classify("I live in Lyon").importance == 5
    assert classify("I love painting").importance > classify("I like painting").importance
    assert classify("I went to a concert yesterday").importance < classify("I went to a concert").importance
    for said in ("I love painting", "I went to a concert yesterday", "My name is Ana"):
        assert 1 <= classify(said).importance <= 5


def test_confidence_falls_for_hedges_and_for_statements_not_in_the_first_person() -> None:
    sure, hedged = classify("I live in Lyon").confidence, classify("I think I live in Lyon").confidence
    assert hedged < sure
    assert classify("Been to Rome once").confidence < classify("I have been to Rome once").confidence
    assert 0 <= hedged <= 1


# the engine ----------------------------------------------------------------------------------------
CHAT = """user: Hi there!
assistant: Hello! How can I help?
user: I live in Lyon and I work as a nurse. Can you recommend a trail?
assistant: Sure, try the Mont d'Or loop.
user: Thanks! I love hiking with my dog."""


def test_a_chat_becomes_atomic_facts_about_the_user_with_their_turns() -> None:
    facts = extract(CHAT)
    assert [f.content for f in facts] == [
        "The user lives in Lyon.", "The user works as a nurse.", "The user loves hiking with their dog."]
    assert [f.turn_refs for f in facts] == [("turn:2",), ("turn:2",), ("turn:4",)]
    assert all(f.speaker == "user" for f in facts)
    assert facts[2].context == "Assistant: Sure, try the Mont d'Or loop."


def test_the_assistant_says_nothing_about_the_user() -> None:
    assert extract("assistant: I love helping people and I live in the cloud.") == []


def test_short_statements_without_a_slot_are_dropped_but_short_slots_are_kept() -> None:
    assert extract("Ana: I did it.") == []
    assert [f.memory_key for f in extract("Ana: I'm an introvert.")] == ["personality.introvert"]


def test_near_duplicates_within_a_log_are_dropped() -> None:
    facts = extract("Ana: I love hiking in the Alps.\nBen: Cool.\nAna: I really love hiking in the Alps!")
    assert len(facts) == 1


def test_a_sentence_going_on_about_the_previous_one_joins_it() -> None:
    facts = extract("Ana: I adopted a puppy last week. It has been chewing all my shoes.")
    assert len(facts) == 1
    assert facts[0].content == "Ana adopted a puppy last week; it has been chewing all their shoes."


def test_the_engine_is_deterministic() -> None:
    assert extract(CHAT) == extract(CHAT)


# input shapes and splitting -----------------------------------------------------------------------------
def test_plain_text_without_speakers_is_the_users() -> None:
    turns = turns_from_text("I moved to Berlin last month.\nIt is cold here.")
    assert [(t.speaker, t.ref) for t in turns] == [("user", "turn:0")]
    assert "cold" in turns[0].text


def test_structured_fields_are_the_users_own_turns() -> None:
    turns = turns_from_fields([("events", "Went climbing with Leo"), ("user_state", None), ("topics", " ")])
    assert turns == [Turn(speaker="user", text="Went climbing with Leo", ref="field:events")]
    assert BuiltinEngine().extract(turns)[0].content == "The user went climbing with Leo."


def test_a_log_too_large_for_one_call_is_split_between_turns_and_nothing_is_dropped() -> None:
    turns = [Turn("Ana", f"I planted tree number {i} in my garden.", f"turn:{i}") for i in range(50)]
    pieces = split_turns(turns, 200)
    assert len(pieces) > 1
    assert all(sum(len(t.text) for t in p) <= 200 for p in pieces)
    assert [t for p in pieces for t in p] == turns


def test_an_overlong_turn_is_cut_between_sentences_and_keeps_its_ref() -> None:
    long = Turn("Ana", " ".join(f"I visited city number {i}." for i in range(40)), "turn:7")
    pieces = split_turns([long], 100)
    parts = [t for p in pieces for t in p]
    assert len(parts) > 1 and all(t.ref == "turn:7" and len(t.text) <= 100 for t in parts)
    assert " ".join(t.text for t in parts) == long.text


# merging with what is known ------------------------------------------------------------------------------
def fact(content: str, key: str | None = None, category: Category = Category.USER_PROFILE) -> Fact:
    return Fact(content=content, category=category, importance=3, confidence=0.8, turn_refs=("turn:0",),
                speaker="user", memory_key=key)


def test_merge_saves_the_unknown_keeps_near_duplicates_and_updates_the_contradicted() -> None:
    assert decide(fact("The user lives in Lyon."), None) is Action.SAVE
    assert decide(fact("The user lives in Lyon."), "the user lives in Lyon") is Action.REPEAT
    assert decide(fact("The user lives in Lyon now."), "The user lives in Lyon.") is Action.REPEAT
    assert decide(fact("The user lives in Paris."), "The user lives in Lyon.") is Action.UPDATE


def test_a_statement_without_a_slot_gets_a_stable_key_of_its_own() -> None:
    a, b = fact("The user went to a concert."), fact("The user went to a museum.")
    assert memory_key_of(a) == memory_key_of(fact("The user went to a concert."))
    assert memory_key_of(a) != memory_key_of(b)
    assert memory_key_problem(a.category, memory_key_of(a)) is None
    assert memory_key_of(fact("x", "profile.location")) == "profile.location"


def test_idempotency_keys_are_derived_from_log_task_and_fact() -> None:
    a = fact("The user lives in Lyon.", "profile.location")
    assert fact_key("log1", "t1", a, "save") == fact_key("log1", "t1", a, "save")
    assert len({fact_key("log1", "t1", a, "save"), fact_key("log2", "t1", a, "save"),
                fact_key("log1", "t2", a, "save"), fact_key("log1", "t1", fact("other"), "save")}) == 4
    import re

    from contracts.envelope import IDEMPOTENCY_KEY_PATTERN
    for key in (fact_key("log1", "t1", a, "save"), step_key("claim", "log1", "t1", 3)):
        assert re.fullmatch(IDEMPOTENCY_KEY_PATTERN, key)
    assert step_key("claim", "log1", "t1", 1) != step_key("claim", "log1", "t1", 2)


@pytest.mark.parametrize(("said", "key"), [
    ("I'm now living in Porto", "profile.location"),
    ("I'm living in Oslo with my partner", "profile.location"),
    ("We finally moved to Lisbon", "profile.location"),
    ("I got a job at Spotify", "profile.occupation"),
    ("I'm working for Shopify", "profile.occupation"),
    ("I became a pharmacist", "profile.occupation"),
    ("I retrained as a teacher", "profile.occupation"),
    ("My new employer is Canva", "profile.occupation"),
    ("I'm engaged now", "relationship.status"),
    ("I got married last spring", "relationship.status"),
    ("We have 3 kids now", "relationship.children"),
    ("I have 2 cats", "relationship.cat_count"),
    ("We adopted another one, so 3 dogs", "relationship.dog_count"),
    ("We got a kitten, so now 4 cats", "relationship.cat_count"),
    ("I'm no longer vegetarian", "preference.diet"),
])
def test_a_changed_slot_is_kept_under_its_key(said: str, key: str) -> None:
    """The facts that change over a life (where, what work, with whom, how many) fill their slot, so
    a later value is a new version of the same memory (issue 30's log path)."""
    facts = extract(f"user: {said}\nassistant: Noted.")
    assert [f.memory_key for f in facts] == [key], facts


@pytest.mark.parametrize("said", ["I came off melatonin", "I no longer have anemia", "I outgrew my gluten allergy"])
def test_a_statement_that_a_fact_ended_is_always_kept(said: str) -> None:
    facts = extract(f"user: {said}\nassistant: Noted.")
    assert len(facts) == 1 and facts[0].content.startswith("The user "), facts
    assert " nows " not in facts[0].content and " noes " not in facts[0].content  # adverbs are not verbs


def test_a_slot_said_with_another_number_is_an_update_not_a_repeat() -> None:
    fact = extract("user: I now have 2 kids\nassistant: Noted.")[0]
    assert decide(fact, "The user has 1 kids.") is Action.UPDATE
    assert decide(fact, "The user has 2 kids.") is Action.REPEAT


def test_a_place_named_home_is_where_the_user_lives() -> None:
    facts = extract("user: Seattle is home now\nassistant: Noted.")
    assert [(f.content, f.memory_key) for f in facts] == [("The user lives in Seattle now.", "profile.location")]
    # not a place's name: not where the user lives
    assert all(f.memory_key != "profile.location" for f in extract("user: the office is home now\nassistant: Noted."))
