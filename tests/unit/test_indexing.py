"""How a memory becomes an index point: sentence passages, the combined dense vector, the
keyword text with the memory's date."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import pytest

from contracts.memory import Category, MemoryState, MemoryStatus, MemoryView
from services.memory.domain.keywords import add_sparse, document_vector, query_vector
from services.memory.search.indexing import (
    CONTEXT_WEIGHT,
    MAX_SENTENCES,
    RERANK_CONTEXT_CHARS,
    content_vector,
    date_words,
    embed_memories,
    embedding_texts,
    keyword_text,
    leading_label,
    memory_vector,
    passage_weights,
    passages,
    passages_vector,
    point_for,
    rerank_text,
    split_sentences,
    state_vector,
    view_of,
)

pytestmark = pytest.mark.unit

WHEN = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def state(content: str, when: datetime = WHEN) -> MemoryState:
    return MemoryState(id=uuid.uuid4(), tenant="t", project="p", content=content, created_at=when, updated_at=when)


def test_one_sentence_is_embedded_as_it_is() -> None:
    assert passages("User prefers dark mode.") == ["User prefers dark mode."]
    assert passages("Caroline: I went to a support group yesterday.") == [
        "Caroline: I went to a support group yesterday."
    ]
    assert passages("  no punctuation at all  ") == ["  no punctuation at all  "]


def test_sentences_carry_the_leading_label() -> None:
    assert passages("Caroline: I went to a support group. It was so powerful! Really?") == [
        "Caroline: I went to a support group.",
        "Caroline: It was so powerful!",
        "Caroline: Really?",
    ]


def test_sentences_without_a_label_are_split_plainly() -> None:
    assert passages("The deploy uses Helm. Staging runs on k3s.") == ["The deploy uses Helm.", "Staging runs on k3s."]


def test_long_prefix_before_a_colon_is_not_a_label() -> None:
    text = "This is a long sentence with a colon in it: here. And more."
    assert leading_label(text) is None
    assert passages(text) == ["This is a long sentence with a colon in it: here.", "And more."]


@pytest.mark.parametrize(
    ("text", "label"),
    [("Caroline: hi", "Caroline"), ("Project Atlas: uses Postgres", "Project Atlas"), ("会议：周一", "会议"),
     ("http://example.com is down", None), ("at 10:30 we met", None), ("no label", None)],
)
def test_leading_label(text: str, label: str | None) -> None:
    assert leading_label(text) == label


def test_cjk_and_line_breaks_split_sentences() -> None:
    assert split_sentences("我喜欢绿茶。我每天都喝！") == ["我喜欢绿茶。", "我每天都喝！"]
    assert split_sentences("first line\nsecond line") == ["first line", "second line"]


def test_abbreviations_do_not_end_sentences() -> None:
    assert split_sentences("Dr. Smith called. He will e.g. come back. St. Paul is nice.") == [
        "Dr. Smith called.", "He will e.g. come back.", "St. Paul is nice.",
    ]


def test_sentence_count_is_capped() -> None:
    text = " ".join(f"Sentence number {i}." for i in range(100))
    parts = split_sentences(text)
    assert len(parts) == MAX_SENTENCES
    assert parts[-1].endswith("Sentence number 99.")
    assert " ".join(parts) == text


def test_memory_vector_is_the_unit_mean() -> None:
    v = memory_vector(np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32))
    assert v == pytest.approx([2**-0.5, 2**-0.5])
    assert memory_vector([[3.0, 4.0]]) == pytest.approx([0.6, 0.8])
    with pytest.raises(ValueError):
        memory_vector(np.zeros((0, 4)))


def test_memory_vector_weights() -> None:
    v = memory_vector(np.array([[1.0, 0.0], [0.0, 1.0]]), [3.0, 1.0])
    assert v == pytest.approx(np.array([3.0, 1.0]) / 10**0.5)
    assert memory_vector([[1.0, 0.0], [0.0, 1.0]], [1.0, 1.0]) == pytest.approx([2**-0.5, 2**-0.5])
    for bad in ([1.0], [1.0, -1.0], [0.0, 0.0]):
        with pytest.raises(ValueError):
            memory_vector([[1.0, 0.0], [0.0, 1.0]], bad)


def test_passage_weights_favour_statements_with_content() -> None:
    texts = passages("Caroline: Wow! I went to a support group with my sister. Did you go?")
    assert texts == ["Caroline: Wow!", "Caroline: I went to a support group with my sister.", "Caroline: Did you go?"]
    wow, statement, question = passage_weights(texts)
    assert wow == pytest.approx(1.0)  # "wow"; the label does not count
    assert statement == pytest.approx(4**0.5)  # went, support, group, sister
    assert question == pytest.approx(0.5 * 1**0.5)  # "go", halved for a question
    assert passage_weights(["我喜欢绿茶。", "你呢？"])[1] < passage_weights(["我喜欢绿茶。", "你呢。"])[1]


def test_passage_weights_degenerate_cases() -> None:
    assert passage_weights(["Just one sentence?"]) == [1.0]
    assert passage_weights(["I.", "A?"]) == [1.0, 1.0]  # no keyword term anywhere: plain mean


class CountingEmbedder:
    model_id = "fake"
    dim = 3

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        rows = [[float(len(t)), 1.0, float(i)] for i, t in enumerate(texts)]
        matrix = np.asarray(rows, dtype=np.float32)
        return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def test_embed_memories_batches_and_combines() -> None:
    one = state("Short memory.")
    two = state("Caroline: First sentence here. Second one?")
    emb = CountingEmbedder()
    vectors = embed_memories(emb, [one, two])
    assert len(emb.calls) == 1
    assert emb.calls[0] == embedding_texts(one) + embedding_texts(two)
    assert embedding_texts(two) == ["Caroline: First sentence here.", "Caroline: Second one?"]
    matrix = emb.embed(emb.calls[0])
    assert vectors[0] == pytest.approx(memory_vector(matrix[:1]), abs=1e-6)
    assert vectors[1] == pytest.approx(
        memory_vector(matrix[1:3], passage_weights(embedding_texts(two))), abs=1e-6
    )
    assert vectors[1] != pytest.approx(memory_vector(matrix[1:3]), abs=1e-6)
    assert all(abs(np.linalg.norm(v) - 1.0) < 1e-6 for v in vectors)
    assert embed_memories(emb, []) == []


def test_keyword_text_adds_the_day_written() -> None:
    s = state("Caroline: I went to a support group.")
    assert date_words(s) == "8 May 2023"
    assert keyword_text(s) == "Caroline: I went to a support group.\n8 May 2023"
    point = point_for(s, [1.0, 0.0, 0.0])
    assert point.sparse == document_vector(keyword_text(s))
    assert set(query_vector("what was on 8 May, 2023?").indices) <= set(point.sparse.indices)
    assert point.payload["created_at"] == WHEN.isoformat()


def test_content_vector_is_the_vector_a_memory_gets() -> None:
    text = "Caroline: First sentence here. Second one?"
    emb = CountingEmbedder()
    assert content_vector(emb, text) == pytest.approx(embed_memories(emb, [state(text)])[0], abs=1e-9)
    texts = embedding_texts(state(text))
    assert passages_vector(texts, emb.embed(texts)) == pytest.approx(content_vector(emb, text), abs=1e-9)
    assert passages_vector(texts, emb.embed(texts)) != pytest.approx(memory_vector(emb.embed(texts)), abs=1e-6)
    # an extracted fact's bracketed date is kept out of what is embedded, here as for the memory: the
    # truth rules and a semantic forget compare like with like (with the date, a fact said again
    # scored ~0.94-0.98 against itself), and the save's primed sentence vectors are reused
    dated = "Caroline went to a support group yesterday (2023-05-07). She felt welcome (May 2023)."
    assert content_vector(emb, dated) == pytest.approx(embed_memories(emb, [state(dated)])[0], abs=1e-9)
    assert content_vector(emb, dated) == pytest.approx(
        content_vector(emb, "Caroline went to a support group yesterday. She felt welcome."), abs=1e-9)


def test_a_point_carries_the_memory_view() -> None:
    """Recall answers from its hits' payloads; a view read back equals the one Postgres would give."""
    later = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    mem = MemoryState(id=uuid.uuid4(), tenant="t", project="p", content="Prefers tea", category=Category.PREFERENCE,
                      memory_key="preference.drinks", importance=4, confidence=0.9, source="mcp", version=3,
                      created_at=WHEN, updated_at=later)
    point = point_for(mem, [0.0] * 4)
    expected = MemoryView.model_validate({**mem.model_dump(exclude={"tenant", "forget_reason"}), "origin": "saved"})
    assert view_of(point.id, point.payload) == expected
    assert view_of(point.id, {**point.payload, "status": MemoryStatus.ACTIVE.value}).status is MemoryStatus.ACTIVE


def test_a_point_from_before_views_has_no_view() -> None:
    old = point_for(state("Prefers tea"), [0.0] * 4).payload
    for field in ("content", "version", "updated_at", "confidence", "source"):
        assert view_of("00000000-0000-0000-0000-000000000001", {k: v for k, v in old.items() if k != field}) is None


# --- context: where a memory came from, indexed at CONTEXT_WEIGHT ----------------------------
def with_context(content: str, context: str | None) -> MemoryState:
    return state(content).model_copy(update={"context": context})


def test_context_is_embedded_after_the_content_and_weighs_less() -> None:
    s = with_context("Nate: I've had them for 3 years now.", "Joanna: How long have you had your turtles? So cute!")
    texts = embedding_texts(s)
    assert texts == ["Nate: I've had them for 3 years now.", "Joanna: How long have you had your turtles?",
                     "Joanna: So cute!"]
    emb = CountingEmbedder()
    [vector] = embed_memories(emb, [s])
    matrix = emb.embed(texts)
    content = np.asarray(passages_vector(texts[:1], matrix[:1]))
    context = np.asarray(passages_vector(texts[1:], matrix[1:]))
    expected = content + CONTEXT_WEIGHT * context
    assert vector == pytest.approx(list(expected / np.linalg.norm(expected)), abs=1e-6)
    assert state_vector(s, matrix) == pytest.approx(vector, abs=1e-9)
    # without a context the vector is the content's, exactly as before
    plain = with_context(s.content, None)
    assert embedding_texts(plain) == texts[:1]
    assert embed_memories(emb, [plain])[0] == pytest.approx(list(content), abs=1e-6)
    with pytest.raises(ValueError, match="2 vectors for 3 texts"):
        state_vector(s, matrix[:2])


def test_context_words_match_at_a_lower_weight() -> None:
    s = with_context("Nate: I've had them for 3 years now.", "Joanna: How long have you had your turtles?")
    point = point_for(s, [1.0, 0.0, 0.0])
    own = dict(zip(*(document_vector(keyword_text(s)).indices, document_vector(keyword_text(s)).values), strict=True))
    ctx = document_vector(s.context or "")
    got = dict(zip(point.sparse.indices, point.sparse.values, strict=True))
    turtles = query_vector("turtles").indices[0]
    assert turtles not in own  # only the context names them...
    assert got[turtles] == pytest.approx(CONTEXT_WEIGHT * dict(zip(ctx.indices, ctx.values, strict=True))[turtles])
    years = query_vector("years").indices[0]
    assert got[years] == pytest.approx(own[years])  # ...and the content's terms keep their weights
    assert list(point.sparse.indices) == sorted(point.sparse.indices)
    assert point.payload["context"] == s.context
    assert keyword_text(s) == keyword_text(with_context(s.content, None))  # the context is not content
    assert add_sparse(document_vector("a b"), document_vector(""), 0.5) == document_vector("a b")


def test_view_of_a_point_written_before_contexts_existed() -> None:
    s = with_context("Short memory.", "where it came from")
    payload = dict(point_for(s, [1.0]).payload)
    assert view_of(str(s.id), payload).context == "where it came from"  # type: ignore[union-attr]
    del payload["context"]
    view = view_of(str(s.id), payload)
    assert view is not None and view.context is None and view.content == "Short memory."


def test_the_reranker_reads_the_end_of_the_context_before_the_content() -> None:
    plain = with_context("Nate: I've had them for 3 years now.", None)
    assert rerank_text(plain) == plain.content
    asked = with_context(plain.content, "Joanna: How long have you had your turtles?")
    assert rerank_text(asked) == "Joanna: How long have you had your turtles?\nNate: I've had them for 3 years now."
    long = with_context(plain.content, "word " * 500 + "How long have you had your turtles?")
    text = rerank_text(long)
    head, content = text.split("\n")
    assert content == plain.content and head.startswith("…word") and head.endswith("turtles?")
    assert len(head) <= RERANK_CONTEXT_CHARS + 1


def test_bracketed_absolute_dates_are_indexed_as_keywords_but_not_embedded() -> None:
    from services.memory.search.late import late_document

    dated = state("Caroline went to a support group yesterday (2023-05-07) and plans a trip next month "
                  "(June 2023), after last week (week of 2023-05-01) and the weekend (weekend of 2023-05-06).")
    plain = state("Caroline went to a support group yesterday and plans a trip next month, after last week "
                  "and the weekend.")
    assert embedding_texts(dated) == embedding_texts(plain)
    assert late_document(dated) == late_document(plain)
    assert "2023-05-07" in keyword_text(dated) and "June 2023" in keyword_text(dated)
    # a date that is the point of a bracket of another kind, or not in brackets, stays embedded
    for kept in ("The release (v2023-05-07b) shipped.", "Married on 2023-05-07.", "Born in (around) 1990."):
        assert embedding_texts(state(kept)) == [kept]
