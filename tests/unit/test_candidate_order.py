"""Recall's learned order of its candidates (issue 34): the features each candidate is read by, and
the order the fitted weights give (services/memory/domain/candidate_order.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.memory.domain.candidate_order import (
    FEATURE_CHARS,
    FEATURES,
    ORDER_RANK_K,
    WEIGHTS,
    Candidate,
    candidate_features,
    learned_order,
)

pytestmark = pytest.mark.unit

T0 = datetime(2026, 5, 1, 18, 0, tzinfo=UTC)


def cand(content: str, *, context: str | None = None, at: datetime = T0, search: float = 0.5,
         late: float = 10.0) -> Candidate:
    return Candidate(content=content, context=context, said_at=at, search_score=search, late_score=late)


def feature(rows: list[list[float]], i: int, name: str) -> float:
    return rows[i][FEATURES.index(name)]


def test_every_fitted_weight_names_a_feature_and_every_feature_has_a_weight() -> None:
    assert set(WEIGHTS) == set(FEATURES)
    assert len(FEATURES) == len(set(FEATURES))


def test_no_candidates_have_no_features_and_each_candidate_has_all_of_them() -> None:
    assert candidate_features("What books has John read?", []) == []
    assert learned_order("What books has John read?", []) == []
    rows = candidate_features("What books has John read?", [cand("John: I read Dune."), cand("Tim: Hi!")])
    assert [len(r) for r in rows] == [len(FEATURES)] * 2


def test_a_memory_is_read_for_whom_it_is_about_and_what_it_says() -> None:
    q = "What books has John read?"
    rows = candidate_features(q, [
        cand('John: I finished "Dune" last week.'),
        cand("Tim: Have you read anything good?"),
        cand("John went to 3 concerts with Maria."),  # no label: about the names it mentions
    ])
    assert feature(rows, 0, "about_asked") == 1 and feature(rows, 0, "about_other") == 0
    assert feature(rows, 1, "about_asked") == 0 and feature(rows, 1, "about_other") == 1
    assert feature(rows, 2, "about_asked") == 1
    assert feature(rows, 1, "is_question") == 1 and feature(rows, 0, "is_question") == 0
    assert feature(rows, 0, "quotes") == 1 and feature(rows, 0, "quotes_what") == 1
    assert feature(rows, 0, "says_when") == 1 and feature(rows, 0, "says_when_asked_when") == 0
    assert feature(rows, 2, "number") == 1 and feature(rows, 2, "names_other") == 1  # Maria
    assert feature(rows, 0, "names_other") == 1  # a title is a name the question does not name
    assert feature(rows, 1, "names_other") == 0  # the label is whom it is about, not a name it mentions


def test_a_question_naming_nobody_says_nothing_of_whom_a_memory_is_about() -> None:
    rows = candidate_features("what did I cook on friday?", [cand("Ana: I cooked dal."), cand("I cooked rice.")])
    assert all(feature(rows, i, n) == 0 for i in (0, 1) for n in ("about_asked", "about_other", "context_names_asked"))


def test_candidates_said_close_together_are_one_conversation() -> None:
    rows = candidate_features("When did Ana move?", [
        cand("Ana: I moved.", at=T0, late=12.0),
        cand("Ana: Yes, to Porto.", at=T0 + timedelta(minutes=20), late=8.0),
        cand("Ana: Boxes everywhere.", at=T0 + timedelta(minutes=45), late=6.0),  # 25 min after the previous
        cand("Ana: I like port wine.", at=T0 + timedelta(days=3), late=11.0),
    ])
    sizes = [feature(rows, i, "session_size") for i in range(4)]
    assert sizes[:3] == [pytest.approx(1.0986, abs=1e-3)] * 3 and sizes[3] == 0.0
    best = [feature(rows, i, "session_best") for i in range(4)]
    assert best[0] == best[1] == best[2] == 0.0  # the conversation holds the best candidate of all
    assert best[3] < 0 and feature(rows, 3, "below_session_best") == 0.0
    assert feature(rows, 1, "below_session_best") < 0


def test_a_memory_answering_another_candidate_is_read_with_it() -> None:
    asked = "Tim: What's your favourite book, John?"
    rows = candidate_features("What is John's favourite book?", [
        cand(asked, late=12.0),
        cand('John: "Dune", without a doubt.', context=asked, late=9.0),
        cand("John: Sure.", context="Tim: Coffee later?", late=8.0),
    ])
    assert feature(rows, 1, "follows_candidate") == 1 and feature(rows, 1, "follows_late") == 0.0  # the best
    assert feature(rows, 1, "answers_question") == 1 and feature(rows, 1, "follows_session_best") == 1
    assert feature(rows, 1, "context_names_asked") == 1
    assert feature(rows, 0, "answered") == 1 and feature(rows, 1, "answered") == 0
    assert feature(rows, 2, "follows_candidate") == 0 and feature(rows, 2, "follows_late") == -5.0


def test_scores_equal_for_every_candidate_count_for_none() -> None:
    rows = candidate_features("x?", [cand("a", search=0.3, late=7.0), cand("b", search=0.3, late=7.0)])
    assert [feature(rows, i, n) for i in (0, 1) for n in ("late", "search")] == [0.0] * 4


def test_the_order_is_a_permutation_with_rank_scores_and_keeps_the_fused_order_on_equal_sums() -> None:
    candidates = [cand(f"Ana: note {i}", search=1 - i / 10, late=10 - i) for i in range(6)]
    order = learned_order("What did Ana note?", candidates, weights={})
    assert [i for i, _ in order] == list(range(6))
    assert [s for _, s in order] == [pytest.approx((ORDER_RANK_K + 1) / (ORDER_RANK_K + r)) for r in range(1, 7)]
    assert order[0][1] == 1.0


def test_the_answer_about_the_person_asked_rises_above_a_question_about_someone_else() -> None:
    """With the fitted weights: two candidates the search and late interaction score alike, the
    first a question asked by someone else, the second the asked person's answer: the answer leads."""
    q = "What books has Caroline read?"
    asking = "Melanie: What books do you like to read?"
    order = learned_order(q, [
        cand(asking, search=0.5, late=11.0),
        cand('Caroline: I loved "Becoming Nicole", it was so inspiring.', context=asking, search=0.5, late=11.0),
        cand("Melanie: I went camping with the kids.", search=0.2, late=6.0),
    ])
    assert [i for i, _ in order] == [1, 0, 2]


def test_a_clear_first_place_stays_first() -> None:
    """A candidate far ahead on both scores is not overturned by the others' words."""
    q = "When did Ana move to Porto?"
    order = learned_order(q, [
        cand("Ana: I moved to Porto in May.", search=0.9, late=20.0),
        *[cand(f'Ana: "Song {i}" last week with Ben, {i} times?', search=0.2, late=5.0 + i / 10) for i in range(10)],
    ])
    assert order[0][0] == 0


def test_a_long_document_is_read_as_far_as_its_first_characters() -> None:
    """The features read a memory's first FEATURE_CHARS characters (and its context's last), so a
    200,000-character document costs what a chat turn does and reads the same as its start."""
    start = 'Ana: We saw "Dune" last week with Ben. ' * (FEATURE_CHARS // 40 + 1)
    tail = " Zed? 42 " * 20_000
    long_ = cand(start + tail, context=tail + "Ben: what did you see?", late=9.0)
    short = cand(start[:FEATURE_CHARS], context="Ben: what did you see?", late=9.0)
    other = cand("Ben: I stayed home.", late=7.0, search=0.2)
    q = "What did Ana see with Ben?"
    assert candidate_features(q, [long_, other]) == candidate_features(q, [short, other])
