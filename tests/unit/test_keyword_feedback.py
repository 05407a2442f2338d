"""Keyword pseudo-relevance feedback in hybrid search (the recall pipeline's rule,
``services.memory.search.recall.search``), over both vector-index adapters: the
second round's sparse query is ``expand_query`` over the first round's hits, and it lets a
memory that shares the best hit's specific words (but not the query's) into the keyword leg.

In-process engines only (the embedded shard in a temporary folder, qdrant-client's local
mode), with hand-made 4-d dense vectors: no model, no server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from qdrant_client import AsyncQdrantClient

from services.memory.adapters.vectors_edge import EdgeVectorIndex
from services.memory.adapters.vectors_qdrant import QdrantServerVectorIndex
from services.memory.domain.keywords import FEEDBACK_MIN_HITS, document_vector, expand_query, query_vector
from services.memory.search.ports import SearchFilter, VectorIndex, VectorPoint
from services.memory.search.recall import search

pytestmark = pytest.mark.unit

DIM = 4
QUERY_DENSE = [1.0, 0.0, 0.0, 0.0]
# key -> (text, dense). The first round's five best hits are "hit" and the four short fillers,
# whose ten words all join the query. "neighbour" shares the hit's word "flaky" but no query word;
# "stranger" shares nothing and is a little closer to the query in the dense space.
DOCS = {
    "hit": ("The zorblax runner is flaky on Mondays", [0.9, 0.1, 0.0, 0.0]),
    "filler1": ("Deploys on Tuesdays", [0.8, 0.6, 0.0, 0.0]),
    "filler2": ("Incidents reviewed", [0.7, 0.7, 0.0, 0.0]),
    "filler3": ("Coffee", [0.6, 0.0, 0.8, 0.0]),
    "filler4": ("Lunch break", [0.5, 0.0, 0.0, 0.866]),
    "stranger": ("Budget plan quarterly", [0.3, 0.0, 0.0, 0.954]),
    "neighbour": ("Flaky tests waste an afternoon", [0.2, 0.0, 0.98, 0.0]),
    # a background of unrelated memories, far from the query: feedback needs FEEDBACK_MIN_HITS hits
    **{f"far{i}": (f"Unrelated memory number {i}", [-0.1, 0.0, 0.0, 0.995]) for i in range(FEEDBACK_MIN_HITS)},
}
IDS = {key: str(uuid.uuid5(uuid.NAMESPACE_URL, key)) for key in DOCS}
KEY_OF = {v: k for k, v in IDS.items()}
FILTER = SearchFilter(tenant="t")


def points() -> list[VectorPoint]:
    return [
        VectorPoint(id=IDS[k], dense=dense, sparse=document_vector(text), payload={"tenant": "t", "status": "active"})
        for k, (text, dense) in DOCS.items()
    ]


@pytest.fixture(params=["edge", "qdrant-local"])
async def index(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorIndex]:
    idx: EdgeVectorIndex | QdrantServerVectorIndex
    if request.param == "edge":
        idx = EdgeVectorIndex(tmp_path / "vectors", DIM)
    else:
        idx = QdrantServerVectorIndex(AsyncQdrantClient(location=":memory:"), "memories", DIM)
    await idx.ensure()
    await idx.upsert(points())
    yield idx
    await idx.close()


async def hybrid(index: VectorIndex, text: str, *, feedback: bool, limit: int = 5) -> dict[str, float]:
    hits = await search(index, dense=QUERY_DENSE, sparse=query_vector(text), filter=FILTER, limit=limit,
                        keyword_feedback=feedback)
    return {KEY_OF[h.id]: h.score for h in hits}


async def test_feedback_lifts_a_memory_sharing_the_best_hits_words(index: VectorIndex) -> None:
    plain = await hybrid(index, "zorblax", feedback=False, limit=7)
    assert list(plain) == ["hit", "filler1", "filler2", "filler3", "filler4", "stranger", "neighbour"]
    fed = await hybrid(index, "zorblax", feedback=True, limit=7)
    assert next(iter(fed)) == "hit"
    assert fed["neighbour"] > fed["stranger"]
    assert list(fed.values()) == sorted(fed.values(), reverse=True)


async def test_feedback_search_is_the_plain_search_with_the_expanded_query(index: VectorIndex) -> None:
    text = "zorblax runner"
    fed = await hybrid(index, text, feedback=True, limit=len(DOCS))  # all of them: ties break either way
    first = await index.search(dense=QUERY_DENSE, sparse=query_vector(text), filter=FILTER, limit=100)
    expanded = expand_query(query_vector(text), [document_vector(DOCS[KEY_OF[h.id]][0]) for h in first])
    assert expanded != query_vector(text)
    second = await index.search(dense=QUERY_DENSE, sparse=expanded, filter=FILTER, limit=len(DOCS))
    assert fed == pytest.approx({KEY_OF[h.id]: h.score for h in second})


async def test_keyword_mode_stays_literal(index: VectorIndex) -> None:
    hits = await search(index, dense=None, sparse=query_vector("zorblax"), filter=FILTER, limit=5, mode="sparse",
                        keyword_feedback=True)
    assert [KEY_OF[h.id] for h in hits] == ["hit"]


async def test_a_small_project_is_searched_without_feedback(index: VectorIndex) -> None:
    few = SearchFilter(tenant="t", project="few")
    await index.upsert([
        VectorPoint(id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"few{k}")), dense=dense, sparse=document_vector(text),
                    payload={"tenant": "t", "project": "few", "status": "active"})
        for k, (text, dense) in DOCS.items() if not k.startswith("far")
    ])
    results = []
    for feedback in (True, False):
        hits = await search(index, dense=QUERY_DENSE, sparse=query_vector("zorblax"), filter=few, limit=7,
                            keyword_feedback=feedback)
        results.append([h.score for h in hits])
    assert results[0] == results[1]
