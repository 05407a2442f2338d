"""What a replay keeps of each memory (its dense and keyword vectors) is keyed by the recipe that
made them: the packed keyword vector round-trips to what the index stores, and a change to the
recipe (here the context weight) changes the keys."""

from __future__ import annotations

import numpy as np
import pytest

from services.memory.domain.keywords import SparseVector, document_vector
from services.memory.search import indexing, vector_cache
from services.memory.search.vector_cache import pack_sparse, recipe_fingerprint, unpack_sparse

pytestmark = pytest.mark.unit


def test_a_keyword_vector_round_trips_as_the_index_stores_it() -> None:
    vector = document_vector("Marathon training for Berlin! Long run on Sunday, 30 km.")
    back = unpack_sparse(pack_sparse(vector))
    assert back is not None and back.indices == vector.indices
    # float32, as the engine keeps them: the point written from the cache is the same point
    assert back.values == tuple(np.asarray(vector.values, np.float32).tolist())
    assert unpack_sparse(pack_sparse(SparseVector((), ()))) == SparseVector((), ())


def test_bytes_of_another_shape_are_a_miss() -> None:
    assert unpack_sparse(b"") is None
    assert unpack_sparse(pack_sparse(document_vector("tea and biscuits"))[:-1]) is None


def test_the_fingerprint_follows_the_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    fingerprint = recipe_fingerprint.__wrapped__
    assert fingerprint() == recipe_fingerprint() == fingerprint()  # deterministic
    monkeypatch.setattr(indexing, "CONTEXT_WEIGHT", indexing.CONTEXT_WEIGHT * 2)
    assert fingerprint() != recipe_fingerprint()
    monkeypatch.undo()
    monkeypatch.setattr(vector_cache, "RECIPE_VERSION", vector_cache.RECIPE_VERSION + 1)
    assert fingerprint() != recipe_fingerprint()
