"""Keyword (sparse) vectors: tokenisation, hashing, weighting."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.memory.domain.keywords import (
    FEEDBACK_MIN_HITS,
    FEEDBACK_WEIGHT,
    SparseVector,
    document_vector,
    expand_query,
    keyword_terms,
    query_vector,
    term_index,
)

pytestmark = pytest.mark.unit


def shared(a: SparseVector, b: SparseVector) -> set[int]:
    return set(a.indices) & set(b.indices)


def test_chinese_run_gives_unigrams_and_overlapping_bigrams() -> None:
    assert keyword_terms("喝绿茶") == ["喝", "喝绿", "绿", "绿茶", "茶"]


def test_chinese_query_matches_memory_without_spaces() -> None:
    doc = document_vector("我最喜欢喝绿茶")
    query = query_vector("绿茶")
    assert term_index("绿茶") in shared(doc, query)
    assert shared(doc, query) == {term_index("绿"), term_index("茶"), term_index("绿茶")}


def test_japanese_kanji_and_kana() -> None:
    terms = keyword_terms("緑茶が好きです")
    assert "緑茶" in terms and "好き" in terms
    assert term_index("緑茶") in shared(document_vector("緑茶が好きです"), query_vector("緑茶"))


def test_korean_hangul_bigrams() -> None:
    assert "한국" in keyword_terms("한국어 공부")


def test_mixed_script_splits_at_script_boundary() -> None:
    assert keyword_terms("Python很好") == ["python", "很", "很好", "好"]


def test_english_case_stopwords_and_short_words() -> None:
    assert keyword_terms("The Cat is on a mat, x 7") == ["cat", "mat", "7"]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("cats", "cat"),
        ("boxes", "box"),
        ("stories", "story"),
        ("classes", "class"),
        ("hiking", "hike"),
        ("hiked", "hikes"),
        ("running", "run"),
        ("stopped", "stop"),
        ("adoption", "adopt"),
        ("generously", "generous"),
        ("painting", "paint"),
        ("Volunteering", "volunteered"),
    ],
)
def test_stemming_conflates_inflections_and_derivations(a: str, b: str) -> None:
    assert keyword_terms(a) == keyword_terms(b)


def test_stemming_keeps_distinct_words_apart_and_other_alphabets_verbatim() -> None:
    assert keyword_terms("news") != keyword_terms("new")
    assert keyword_terms("university") != keyword_terms("universe")
    assert keyword_terms("café crème") == ["café", "crème"]
    assert keyword_terms("Москва москвы") == ["москва", "москвы"]


def test_plural_query_matches_singular_memory() -> None:
    assert shared(document_vector("I have a cat named Miso"), query_vector("cats")) == {term_index("cat")}


def test_nfkc_and_casefold() -> None:
    assert keyword_terms("ＰＯＳＴＧＲＥＳ Straße") == keyword_terms("postgres STRASSE")


def test_words_with_digits_are_kept_verbatim() -> None:
    assert keyword_terms("GPT4 and v2 in 2024") == ["gpt4", "v2", "2024"]


def test_hash_values_are_pinned() -> None:
    # A change here re-keys every stored keyword vector: it needs a re-index.
    assert term_index("cat") == 1787499195
    assert term_index("绿茶") == 1945614005
    assert term_index("緑茶") == 309944236
    assert all(0 <= term_index(t) < 2**31 for t in ("cat", "绿茶", "緑茶"))


@pytest.mark.parametrize("text", ["", "   ", "\n\t", "the a of", "!!! ???"])
def test_empty_or_contentless_text_gives_empty_vector(text: str) -> None:
    assert document_vector(text) == SparseVector((), ())
    assert query_vector(text) == SparseVector((), ())
    assert document_vector(text).is_empty


def test_query_weights_are_one_per_distinct_term() -> None:
    vec = query_vector("tea tea green tea")
    assert len(vec.indices) == 2
    assert vec.values == (1.0, 1.0)


def test_document_weights_saturate_with_term_frequency() -> None:
    once = document_vector("tea coffee")
    thrice = document_vector("tea tea tea coffee")
    w = dict(zip(thrice.indices, thrice.values, strict=True))[term_index("tea")]
    w1 = dict(zip(once.indices, once.values, strict=True))[term_index("tea")]
    assert w1 < w < 2.2  # grows with tf, bounded by k1 + 1


def test_short_documents_weigh_a_term_more_than_long_ones() -> None:
    short = document_vector("tea")
    long = document_vector("tea " + " ".join(f"word{i}" for i in range(100)))
    idx = term_index("tea")
    assert (
        dict(zip(short.indices, short.values, strict=True))[idx]
        > dict(zip(long.indices, long.values, strict=True))[idx]
    )


@given(st.text(max_size=300))
def test_vectors_are_well_formed(text: str) -> None:
    for vec in (document_vector(text), query_vector(text)):
        assert list(vec.indices) == sorted(set(vec.indices))
        assert len(vec.indices) == len(vec.values)
        assert all(v > 0 for v in vec.values)
        assert all(0 <= i < 2**31 for i in vec.indices)


@given(st.text(alphabet=st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF), min_size=2, max_size=20))
def test_every_cjk_substring_pair_is_findable(text: str) -> None:
    doc = set(document_vector(text).indices)
    for i in range(len(text) - 1):
        assert set(query_vector(text[i : i + 2]).indices) <= doc


# --- pseudo-relevance feedback ----------------------------------------------


def weights(vector: SparseVector) -> dict[int, float]:
    return dict(zip(vector.indices, vector.values, strict=True))


FEEDBACK_POOL = [
    document_vector("Caroline: I researched adoption agencies for LGBTQ parents"),
    document_vector("Caroline: The adoption agencies were very welcoming"),
    document_vector("Caroline: My mentor helped with the agencies' paperwork"),
    document_vector("Caroline: I painted a sunset"),
    document_vector("Caroline: The parade was fun"),
    *[document_vector(f"Caroline: Day {i} went fine") for i in range(6)],
]


def test_feedback_adds_the_best_hits_specific_terms_with_lower_weight() -> None:
    query = query_vector("What did Caroline research?")
    expanded = weights(expand_query(query, FEEDBACK_POOL, docs=2, terms=3, min_hits=1))
    own = weights(query)
    assert all(expanded[i] == own[i] for i in own)  # the query's own terms keep their weights
    added = {i: w for i, w in expanded.items() if i not in own}
    # "adopt" and "agenc" are in both relevant hits, "welcom" is a larger share of the shorter one
    # than "lgbtq" and "parent" are of the longer; "agenc" is also in a third, less relevant hit
    assert set(added) == {term_index("adopt"), term_index("agenc"), term_index("welcom")}
    assert added[term_index("adopt")] > added[term_index("welcom")] > added[term_index("agenc")]
    assert sum(added.values()) == pytest.approx(FEEDBACK_WEIGHT * sum(own.values()))


def test_feedback_passes_over_terms_every_hit_has() -> None:
    query = query_vector("adoption")
    expanded = weights(expand_query(query, FEEDBACK_POOL, docs=2, terms=5, min_hits=1))
    assert term_index("carolin") not in expanded  # in every hit: says nothing about these two
    assert term_index("agenc") in expanded


def test_feedback_leaves_the_query_alone_when_there_is_nothing_to_add() -> None:
    query = query_vector("adoption")
    assert expand_query(query, []) is query
    assert expand_query(query, [SparseVector((), ())], min_hits=1) is query
    assert expand_query(query, [document_vector("adoption")], min_hits=1) is query  # nothing beyond its own term
    empty = query_vector("")
    assert expand_query(empty, FEEDBACK_POOL, min_hits=1) is empty


def test_feedback_needs_a_background_of_hits() -> None:
    query = query_vector("adoption")
    assert len(FEEDBACK_POOL) < FEEDBACK_MIN_HITS
    assert expand_query(query, FEEDBACK_POOL) is query
    background = [document_vector(f"Melanie: Note {i} about pottery") for i in range(FEEDBACK_MIN_HITS)]
    assert expand_query(query, FEEDBACK_POOL + background) != query


def test_feedback_is_deterministic_and_well_formed() -> None:
    query = query_vector("Caroline adoption")
    one = expand_query(query, FEEDBACK_POOL, min_hits=1)
    assert one == expand_query(query, list(FEEDBACK_POOL), min_hits=1)
    assert list(one.indices) == sorted(set(one.indices))
    assert all(v > 0 for v in one.values)
    assert len(one.indices) <= len(query.indices) + 10
