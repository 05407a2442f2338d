"""Deep recall's pure parts: questions taken apart, names matched, ranked lists fused (issue 34)."""

from __future__ import annotations

import pytest

from services.memory.domain.entities import entity_ranking, memory_subjects, question_entities
from services.memory.domain.question_split import MAX_SUBQUESTIONS, split_question
from services.memory.search.hops import ENTITY_WEIGHT, SUBQUESTION_WEIGHT, deep_fusion, fuse_rankings

pytestmark = pytest.mark.unit


# --- question splitting --------------------------------------------------------------------------
@pytest.mark.parametrize(("question", "parts"), [
    ("What subject have Caroline and Melanie both painted?",
     ["What subject have Caroline painted?", "What subject have Melanie painted?"]),
    ("Which city have both Jean and John visited?", ["Which city have Jean visited?", "Which city have John visited?"]),
    ("When did Caroline and Melanie go to a pride festival together?",
     ["When did Caroline go to a pride festival?", "When did Melanie go to a pride festival?"]),
    ("When did Melanie go on a hike after the roadtrip?", ["When did Melanie go on a hike?", "Melanie the roadtrip?"]),
    ("What did Jean go through before meeting Maria?", ["What did Jean go through?", "Jean meeting Maria?"]),
    ("Is the friend who wrote Deborah the motivational quote no longer alive?",
     ["friend who wrote Deborah the motivational quote?", "Is the friend no longer alive?"]),
    ("When did Caroline meet up with her friends, family, and mentors?",
     ["When did Caroline meet up with her friends?", "When did Caroline meet up with her family?",
      "When did Caroline meet up with her mentors?"]),
    ("What pets and hobbies does Melanie have?", ["What pets does Melanie have?", "What hobbies does Melanie have?"]),
])
def test_joined_questions_are_taken_apart(question: str, parts: list[str]) -> None:
    assert split_question(question) == parts


@pytest.mark.parametrize("question", [
    "What books has John read?",                              # one thing: nothing to take apart
    "What did John do the week before August 3, 2023?",       # a date is the anchor: left to the search
    "What did Maria do after 10 May?",
    "Where did Caroline move from 4 years ago?",
    "Which 青茶 do I like?",                                    # not English
    "Who is up and running?",                                 # "up and running" joins no things
    "",
])
def test_other_questions_are_left_whole(question: str) -> None:
    assert split_question(question) == []


def test_sub_questions_are_few_and_distinct() -> None:
    parts = split_question("What did Ana buy: apples, pears, plums, figs and grapes?")
    assert 2 <= len(parts) <= MAX_SUBQUESTIONS
    assert len(set(parts)) == len(parts)
    assert split_question("Did Jon and Jon go?") == []  # the same name twice is not two things


# --- entities ------------------------------------------------------------------------------------
def test_question_entities_leave_out_question_words() -> None:
    assert question_entities("What did Caroline's dog Biscuit eat in Lisbon?") == {"caroline", "biscuit", "lisbon"}
    assert question_entities("When did I go?") == frozenset()


def test_a_memory_is_about_its_speaker_or_else_whom_it_names() -> None:
    assert memory_subjects("Tim: John lent me a book.") == {"tim"}  # the speaker, not whom they talk to
    assert memory_subjects("John lent Tim a book.") == {"john", "tim"}
    assert memory_subjects("lent a book") == frozenset()


def test_entity_ranking_keeps_the_order_of_the_hits_about_what_the_question_names() -> None:
    ranked = [(1, "Tim: I read Dune."), (2, "John: I read The Alchemist."), (3, "the weather was nice"),
              (4, "Tim: John lent me a book."), (5, "John finished Dune.")]
    assert entity_ranking("What books has John read?", ranked) == [2, 5]
    assert entity_ranking("what books did i read?", ranked) == []


def test_deep_fusion_lifts_the_hits_about_the_question_and_its_parts() -> None:
    first = [("a", "Tim: I read Dune."), ("b", "Tim: Great bookshelf!"), ("c", "John: I read The Alchemist.")]
    fused = deep_fusion("What books has John read?", first)
    expected = fuse_rankings([["a", "b", "c"], ["c"]], [1.0, ENTITY_WEIGHT])
    assert fused == expected
    assert [k for k, _ in fused].index("c") < 2  # John's turn is no longer last
    with_parts = deep_fusion("What books has John read?", first, [["d", "c"]])
    assert with_parts == fuse_rankings([["a", "b", "c"], ["c"], ["d", "c"]], [1.0, ENTITY_WEIGHT, SUBQUESTION_WEIGHT])
    assert deep_fusion("what is new?", first) == fuse_rankings([["a", "b", "c"]], [1.0])


# --- fusion --------------------------------------------------------------------------------------
def test_fusion_is_weighted_reciprocal_rank() -> None:
    fused = fuse_rankings([["a", "b", "c"], ["c", "d"]], [1.0, 0.5], k=10)
    expected = {"a": 1 / 11, "b": 1 / 12, "c": 1 / 13 + 0.5 / 11, "d": 0.5 / 12}
    best = 1.5 / 11
    assert [item for item, _ in fused] == sorted(expected, key=lambda i: -expected[i])
    assert dict(fused) == pytest.approx({i: s / best for i, s in expected.items()})


def test_fusion_scores_one_for_first_everywhere_and_breaks_ties_by_first_appearance() -> None:
    fused = fuse_rankings([["x", "y"], ["x", "z"]], [1.0, 1.0])
    assert fused[0] == ("x", pytest.approx(1.0))
    assert [i for i, _ in fused] == ["x", "y", "z"]  # y and z tie: y was seen first
    assert fuse_rankings([["a", "a", "b"]], [1.0]) == fuse_rankings([["a", "b"]], [1.0])  # a repeat counts once
    assert fuse_rankings([["a"]], [0.0])[0][0] == "a"


def test_fusion_refuses_mismatched_or_negative_weights() -> None:
    with pytest.raises(ValueError):
        fuse_rankings([["a"], ["b"]], [1.0])
    with pytest.raises(ValueError):
        fuse_rankings([["a"]], [-1.0])
