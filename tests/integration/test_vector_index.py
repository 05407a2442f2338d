"""Vector index adapters against real engines: Qdrant Edge (embedded, on disk)
and qdrant-client's local mode. Real MiniLM embeddings, real keyword vectors."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient

from services.memory.adapters.embedder import MiniLMEmbedder
from services.memory.adapters.vector_factory import build_vector_index
from services.memory.adapters.vectors_edge import EdgeVectorIndex, ShardLockedError
from services.memory.adapters.vectors_qdrant import CollectionOwnedElsewhere, QdrantServerVectorIndex
from services.memory.domain.keywords import SparseVector, document_vector, query_vector
from services.memory.search.ports import FINGERPRINT_FIELD, SearchFilter, SearchHit, VectorIndex, VectorPoint
from services.memory.search.recall import search

pytestmark = pytest.mark.integration

DIM = 384
MODES = ("hybrid", "dense", "sparse")


@dataclass(frozen=True)
class Memory:
    key: str
    tenant: str
    project: str
    category: str
    text: str

    @property
    def id(self) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"engram-test/{self.key}"))


CORPUS: tuple[Memory, ...] = (
    # tenant "alice", project "home"
    Memory("dog", "alice", "home", "fact", "I adopted a golden retriever named Biscuit last spring"),
    Memory("tea", "alice", "home", "preference", "My favourite drink is green tea, especially sencha"),
    Memory("tea_zh", "alice", "home", "preference", "我最喜欢喝绿茶"),
    Memory("tea_ja", "alice", "home", "preference", "緑茶が好きです"),
    Memory("peanuts", "alice", "home", "fact", "I am allergic to peanuts"),
    Memory("sister", "alice", "home", "fact", "My sister lives in Lisbon and works as an architect"),
    Memory("hiking", "alice", "home", "preference", "I go hiking in the Dolomites every August"),
    Memory("car", "alice", "home", "fact", "My car is a 2015 blue Subaru Outback"),
    Memory("darkmode", "alice", "home", "preference", "I prefer dark mode in every editor"),
    Memory("birthday", "alice", "home", "fact", "My daughter's birthday is on March 3rd"),
    # tenant "alice", project "work"
    Memory(
        "runner",
        "alice",
        "work",
        "fact",
        "The deploy pipeline uses the Zorblax-7 runner on the staging cluster",
    ),
    Memory("standup", "alice", "work", "fact", "Our team standup is at 9:30 every weekday"),
    Memory(
        "db", "alice", "work", "fact", "The production database is PostgreSQL 16 with logical replication"
    ),
    Memory(
        "lint",
        "alice",
        "work",
        "decision",
        "Use ruff for linting and pytest for tests in the engram repository",
    ),
    Memory("tax", "alice", "work", "task", "The quarterly tax filing deadline is April 15"),
    Memory(
        "ratelimit",
        "alice",
        "work",
        "decision",
        "The API gateway rate limit is 100 requests per minute per token",
    ),
    # tenant "bob", project "home"
    Memory("b_cat", "bob", "home", "fact", "I have a cat called Miso who loves tuna"),
    Memory("b_coffee", "bob", "home", "preference", "My favourite drink is black coffee with no sugar"),
    Memory("b_coffee_zh", "bob", "home", "preference", "我喜欢喝咖啡"),
    Memory("b_ski", "bob", "home", "preference", "I go skiing in the Alps each winter"),
    Memory("b_brother", "bob", "home", "fact", "My brother lives in Toronto and is a nurse"),
    Memory("b_bike", "bob", "home", "fact", "I ride a red road bike to the office"),
    Memory("b_vegan", "bob", "home", "preference", "I have been vegan since 2019"),
    Memory("b_piano", "bob", "home", "fact", "I am learning to play the piano"),
    # tenant "bob", project "work"
    Memory("b_ci", "bob", "work", "fact", "Our CI runs on GitHub Actions with self-hosted runners"),
    Memory("b_db", "bob", "work", "fact", "The analytics warehouse is ClickHouse"),
    Memory("b_oncall", "bob", "work", "task", "On-call rotation changes every Monday at noon"),
    Memory("b_style", "bob", "work", "decision", "We format Go code with gofumpt"),
    Memory("b_release", "bob", "work", "task", "The next release is planned for the end of June"),
    Memory("b_budget", "bob", "work", "task", "Cloud budget review is due on the first Friday of the month"),
)
BY_KEY = {m.key: m for m in CORPUS}
ID_TO_KEY = {m.id: m.key for m in CORPUS}


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture(scope="module")
def corpus_points(embedder: MiniLMEmbedder) -> list[VectorPoint]:
    dense = embedder.embed([m.text for m in CORPUS])
    return [
        VectorPoint(
            id=m.id,
            dense=dense[i].tolist(),
            sparse=document_vector(m.text),
            payload={
                "tenant": m.tenant,
                "project": m.project,
                "status": "active",
                "category": m.category,
                "text": m.text,
            },
        )
        for i, m in enumerate(CORPUS)
    ]


IndexFactory = Callable[[], VectorIndex]


@pytest.fixture(params=["edge", "qdrant-local"])
def make_index(request: pytest.FixtureRequest, tmp_path: Path) -> IndexFactory:
    """A factory, so edge tests can reopen the same shard directory."""
    if request.param == "edge":
        return lambda: EdgeVectorIndex(tmp_path / "vectors", DIM)
    client = AsyncQdrantClient(location=":memory:")
    # claimed, so every test below also shows the owner marker never shows up in a search or count
    return lambda: QdrantServerVectorIndex(client, "memories", DIM, owner="this-install")


@pytest.fixture
async def index(make_index: IndexFactory, corpus_points: list[VectorPoint]) -> AsyncIterator[VectorIndex]:
    idx = make_index()
    await idx.ensure()
    await idx.upsert(corpus_points)
    yield idx
    await idx.close()


@pytest.fixture
def ask(embedder: MiniLMEmbedder, index: VectorIndex) -> Callable[..., object]:
    """``await ask(text, tenant, mode=..., **filter)`` -> list of hit keys."""

    async def run(
        text: str, tenant: str = "alice", *, mode: str = "hybrid", limit: int = 5, **conditions: str | None
    ) -> list[str]:
        hits = await search(
            index,
            dense=embedder.embed([text])[0].tolist(),
            sparse=query_vector(text),
            filter=SearchFilter(tenant=tenant, **conditions),
            limit=limit,
            mode=mode,  # type: ignore[arg-type]
            keyword_feedback=True,
        )
        return [ID_TO_KEY.get(h.id, h.id) for h in hits]

    return run


def count_of(tenant: str, project: str | None = None) -> int:
    return sum(1 for m in CORPUS if m.tenant == tenant and (project is None or m.project == project))


async def test_ensure_is_idempotent_and_counts(index: VectorIndex) -> None:
    await index.ensure()
    await index.ensure()
    assert await index.count(SearchFilter(tenant="alice")) == count_of("alice")
    assert await index.count(SearchFilter(tenant="bob")) == count_of("bob")
    assert await index.count(SearchFilter(tenant="nobody")) == 0


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What kind of dog do I have?", "dog"),
        ("When is my kid's birthday?", "birthday"),
        ("Which linter do we use for the code?", "lint"),
        ("what food allergies do I have", "peanuts"),
        ("Where does my sibling live?", "sister"),
    ],
)
async def test_hybrid_finds_paraphrased_memory_first(ask, query: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert (await ask(query))[0] == expected


async def test_hybrid_scores_are_rrf_and_descending(index: VectorIndex, embedder: MiniLMEmbedder) -> None:
    text = "green tea"
    hits = await search(
        index,
        dense=embedder.embed([text])[0].tolist(),
        sparse=query_vector(text),
        filter=SearchFilter(tenant="alice"),
        limit=5,
        keyword_feedback=True,
    )
    assert ID_TO_KEY[hits[0].id] == "tea"
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert scores[0] == pytest.approx(1.0)  # rank 1 in both prefetches: 1/2 + 1/2 with k=2
    assert isinstance(hits[0], SearchHit) and hits[0].payload["text"] == BY_KEY["tea"].text


async def test_keyword_only_finds_rare_exact_term(ask) -> None:  # type: ignore[no-untyped-def]
    assert await ask("zorblax", mode="sparse") == ["runner"]


async def test_dense_only_search(ask) -> None:  # type: ignore[no-untyped-def]
    assert (await ask("puppy", mode="dense"))[0] == "dog"


async def test_cjk_keyword_search(ask) -> None:  # type: ignore[no-untyped-def]
    assert (await ask("绿茶", mode="sparse"))[0] == "tea_zh"
    assert (await ask("緑茶", mode="sparse"))[0] == "tea_ja"
    # MiniLM is English-only, so in hybrid mode the dense side may rank the
    # Japanese memory first; fused, the Chinese one still makes the top two.
    assert "tea_zh" in (await ask("绿茶", mode="hybrid"))[:2]


@pytest.mark.parametrize("mode", MODES)
async def test_tenant_isolation_in_every_mode(ask, index: VectorIndex, mode: str) -> None:  # type: ignore[no-untyped-def]
    for text in ["golden retriever Biscuit", "zorblax runner", "绿茶", "green tea", "favourite drink"]:
        keys = await ask(text, "bob", mode=mode, limit=50, status=None)
        if mode != "sparse":
            assert keys, "bob's own memories stay reachable by dense similarity"
        assert all(BY_KEY[k].tenant == "bob" for k in keys), (mode, text, keys)
        keys = await ask(text, "alice", mode=mode, limit=50, status=None)
        assert all(BY_KEY[k].tenant == "alice" for k in keys), (mode, text, keys)
    assert await ask("golden retriever Biscuit", "mallory", mode=mode, limit=50, status=None) == []


async def test_shared_vocabulary_does_not_leak_across_tenants(ask) -> None:  # type: ignore[no-untyped-def]
    # Both tenants have a "favourite drink" memory; each sees only their own.
    assert (await ask("favourite drink", "alice", mode="sparse"))[0] == "tea"
    assert (await ask("favourite drink", "bob", mode="sparse"))[0] == "b_coffee"
    assert "tea_zh" not in await ask("喜欢喝", "bob", mode="sparse", limit=50)


async def test_keyword_scores_ignore_other_tenants_vocabulary(index: VectorIndex) -> None:
    async def zorblax_score() -> float:
        hits = await index.search(
            dense=None,
            sparse=query_vector("zorblax"),
            filter=SearchFilter(tenant="alice"),
            limit=1,
            mode="sparse",
        )
        return hits[0].score

    before = await zorblax_score()
    noisy = [
        VectorPoint(
            id=str(uuid.uuid4()),
            dense=[1.0] + [0.0] * (DIM - 1),
            sparse=document_vector(f"zorblax zorblax note {i}"),
            payload={"tenant": "mallory", "status": "active"},
        )
        for i in range(40)
    ]
    await index.upsert(noisy)
    assert await zorblax_score() == pytest.approx(before)  # IDF is computed over alice's points only


async def test_project_filter(ask, index: VectorIndex) -> None:  # type: ignore[no-untyped-def]
    for mode in MODES:
        keys = await ask("deploy database standup tea dog", mode=mode, limit=50, project="work")
        assert keys and all(BY_KEY[k].project == "work" for k in keys), (mode, keys)
    assert await ask("What kind of dog do I have?", project="work", limit=3) != ["dog"]
    assert "dog" not in await ask("What kind of dog do I have?", project="work", limit=50)
    assert await index.count(SearchFilter(tenant="alice", project="work")) == count_of("alice", "work")


async def test_category_filter(ask) -> None:  # type: ignore[no-untyped-def]
    keys = await ask("drink tea coffee editor hiking", limit=50, category="preference")
    assert keys and all(BY_KEY[k].category == "preference" and BY_KEY[k].tenant == "alice" for k in keys)


async def test_status_filter_after_set_payload(ask, index: VectorIndex) -> None:  # type: ignore[no-untyped-def]
    dog = BY_KEY["dog"].id
    await index.set_payload([dog], {"status": "forgotten"})
    for mode in MODES:
        assert "dog" not in await ask("golden retriever Biscuit", mode=mode, limit=50)  # default: active only
    assert await ask("golden retriever Biscuit", status="forgotten") == ["dog"]
    assert (await ask("golden retriever Biscuit", status=None))[0] == "dog"
    assert await index.count(SearchFilter(tenant="alice")) == count_of("alice") - 1
    assert await index.count(SearchFilter(tenant="alice", status=None)) == count_of("alice")
    # set_payload merges: the other fields are untouched
    hits = await ask("golden retriever Biscuit", status="forgotten", project="home", category="fact")
    assert hits == ["dog"]


async def test_set_payload_refuses_tenant_change(index: VectorIndex) -> None:
    with pytest.raises(ValueError, match="tenant"):
        await index.set_payload([BY_KEY["dog"].id], {"tenant": "bob"})


async def test_delete(ask, index: VectorIndex) -> None:  # type: ignore[no-untyped-def]
    await index.delete([BY_KEY["runner"].id, str(uuid.uuid4())])  # unknown id ignored
    assert await ask("zorblax", mode="sparse") == []
    assert "runner" not in await ask("deploy pipeline runner", limit=50, status=None)
    assert await index.count(SearchFilter(tenant="alice", status=None)) == count_of("alice") - 1


async def test_upsert_same_id_replaces(ask, index: VectorIndex, embedder: MiniLMEmbedder) -> None:  # type: ignore[no-untyped-def]
    before = await index.count(SearchFilter(tenant="alice", status=None))
    m = BY_KEY["car"]
    text = "My car is now a green electric Volvo"
    point = VectorPoint(
        id=m.id,
        dense=embedder.embed([text])[0].tolist(),
        sparse=document_vector(text),
        payload={"tenant": "alice", "project": "home", "status": "active", "category": "fact", "text": text},
    )
    await index.upsert([point])
    await index.upsert([point])
    assert await index.count(SearchFilter(tenant="alice", status=None)) == before
    assert await ask("volvo", mode="sparse") == ["car"]
    assert await ask("subaru", mode="sparse") == []


async def test_large_upsert_and_numpy_vectors(index: VectorIndex) -> None:
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((300, DIM)).astype(np.float32)
    points = [
        VectorPoint(
            id=str(uuid.uuid4()),
            dense=vectors[i],
            sparse=document_vector(f"synthetic memory number {i} about topic{i % 10}"),
            payload={"tenant": "carol", "project": "bulk", "status": "active", "category": "fact"},
        )
        for i in range(300)
    ]
    await index.upsert(points)
    assert await index.count(SearchFilter(tenant="carol")) == 300
    hits = await index.search(
        dense=vectors[42],
        sparse=query_vector("topic2"),
        filter=SearchFilter(tenant="carol"),
        limit=10,
        mode="dense",
    )
    assert hits[0].id == points[42].id
    assert hits[0].score == pytest.approx(1.0, abs=1e-4)
    sparse_hits = await index.search(
        dense=None,
        sparse=query_vector("topic2"),
        filter=SearchFilter(tenant="carol"),
        limit=100,
        mode="sparse",
    )
    assert len(sparse_hits) == 30
    assert await index.count(SearchFilter(tenant="alice")) == count_of("alice")  # others untouched


async def test_empty_sparse_query(index: VectorIndex, embedder: MiniLMEmbedder) -> None:
    empty = query_vector("the of and")
    assert empty == SparseVector((), ())
    assert (
        await index.search(
            dense=None, sparse=empty, filter=SearchFilter(tenant="alice"), limit=5, mode="sparse"
        )
        == []
    )
    hits = await index.search(
        dense=embedder.embed(["golden retriever"])[0].tolist(),
        sparse=empty,
        filter=SearchFilter(tenant="alice"),
        limit=3,
    )
    assert ID_TO_KEY[hits[0].id] == "dog"  # hybrid falls back to the dense ranking


async def test_missing_vector_for_mode_raises(index: VectorIndex) -> None:
    flt = SearchFilter(tenant="alice")
    with pytest.raises(ValueError, match="dense"):
        await index.search(dense=None, sparse=query_vector("tea"), filter=flt, limit=5)
    with pytest.raises(ValueError, match="dense"):
        await index.search(dense=None, sparse=query_vector("tea"), filter=flt, limit=5, mode="dense")
    with pytest.raises(ValueError, match="sparse"):
        await index.search(dense=[0.0] * DIM, sparse=None, filter=flt, limit=5)
    with pytest.raises(ValueError, match="sparse"):
        await index.search(dense=[0.0] * DIM, sparse=None, filter=flt, limit=5, mode="sparse")
    with pytest.raises(ValueError, match="dimensions"):
        await index.search(dense=[0.0] * 3, sparse=None, filter=flt, limit=5, mode="dense")


def test_filter_and_point_validation() -> None:
    with pytest.raises(ValueError):
        SearchFilter(tenant="")
    with pytest.raises(ValueError):
        VectorPoint(id="not-a-uuid", dense=[0.0], sparse=SparseVector((), ()), payload={"tenant": "a"})
    with pytest.raises(ValueError, match="tenant"):
        VectorPoint(id=str(uuid.uuid4()), dense=[0.0], sparse=SparseVector((), ()), payload={})


async def test_drop_then_ensure_is_empty(index: VectorIndex, corpus_points: list[VectorPoint]) -> None:
    await index.drop()
    await index.ensure()
    assert await index.count(SearchFilter(tenant="alice", status=None)) == 0
    await index.upsert(corpus_points[:3])  # usable again after the rebuild
    assert await index.count(SearchFilter(tenant="alice")) == 3


async def test_fingerprints_size_and_point_ids(index: VectorIndex, corpus_points: list[VectorPoint]) -> None:
    """What a replay reads to keep the points already right (both adapters; the owner marker of a
    claimed Qdrant collection is never one of them)."""
    ids = [p.id for p in corpus_points]
    assert await index.size() == len(ids)
    assert sorted(await index.point_ids()) == sorted(ids)
    assert await index.fingerprints(ids[:2]) == {ids[0]: None, ids[1]: None}  # written without one
    marked = VectorPoint(ids[0], corpus_points[0].dense, corpus_points[0].sparse,
                         {**corpus_points[0].payload, FINGERPRINT_FIELD: "f1"})
    await index.upsert([marked])
    unknown = str(uuid.uuid4())
    assert await index.fingerprints([ids[0], ids[1], unknown]) == {ids[0]: "f1", ids[1]: None}
    assert await index.fingerprints([]) == {}
    await index.delete(ids[:1])
    assert await index.size() == len(ids) - 1 and ids[0] not in await index.point_ids()


async def test_delete_tenant_removes_only_that_tenants_points(index: VectorIndex) -> None:
    """A purge heard by a replica that did not run it (both adapters)."""
    everyone = SearchFilter(tenant="alice", status=None)
    alice = await index.count(everyone)
    others = await index.size() - alice
    assert alice > 0 and others > 0
    await index.delete_tenant("alice")
    assert await index.count(everyone) == 0 and await index.size() == others
    await index.delete_tenant("alice")  # again: nothing left to remove
    assert await index.size() == others


# --- edge only -------------------------------------------------------------

REPO_ROOT = Path(__file__).resolve().parents[2]


async def run_python(script: str) -> int:
    """Run ``script`` in a fresh interpreter (another process) from the repo root."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, cwd=REPO_ROOT)
    return await proc.wait()


async def test_edge_data_survives_close_and_reopen(tmp_path: Path, corpus_points: list[VectorPoint]) -> None:
    path = tmp_path / "shard"
    first = EdgeVectorIndex(path, DIM)
    await first.ensure()
    await first.upsert(corpus_points)
    await first.set_payload([BY_KEY["dog"].id], {"status": "forgotten"})
    await first.close()

    second = EdgeVectorIndex(path, DIM)
    await second.ensure()
    assert await second.count(SearchFilter(tenant="alice", status=None)) == count_of("alice")
    assert await second.count(SearchFilter(tenant="alice", status="forgotten")) == 1
    hits = await second.search(
        dense=None,
        sparse=query_vector("zorblax"),
        filter=SearchFilter(tenant="alice"),
        limit=3,
        mode="sparse",
    )
    assert [ID_TO_KEY[h.id] for h in hits] == ["runner"]
    await second.close()


async def test_edge_survives_a_crash_without_close(tmp_path: Path) -> None:
    """Updates are in the WAL as soon as upsert returns: a killed process loses nothing."""
    path = tmp_path / "crash"
    script = f"""
import asyncio, os, uuid
from pathlib import Path
from services.memory.search.ports import VectorPoint
from services.memory.adapters.vectors_edge import EdgeVectorIndex
from services.memory.domain.keywords import document_vector
async def main():
    idx = EdgeVectorIndex(Path({str(path)!r}), 4)
    await idx.ensure()
    await idx.upsert([VectorPoint(str(uuid.uuid4()), [1.0, 0.0, 0.0, float(i)], document_vector("crash test"),
                                  {{"tenant": "t", "status": "active"}}) for i in range(100)])
    os._exit(0)  # no close, no flush
asyncio.run(main())
"""
    assert await run_python(script) == 0
    idx = EdgeVectorIndex(path, 4)
    await idx.ensure()
    assert await idx.count(SearchFilter(tenant="t")) == 100
    await idx.close()


async def test_edge_refuses_second_opener(tmp_path: Path) -> None:
    path = tmp_path / "locked"
    first = EdgeVectorIndex(path, DIM)
    await first.ensure()
    with pytest.raises(ShardLockedError):
        await EdgeVectorIndex(path, DIM).ensure()
    with pytest.raises(ShardLockedError):
        await EdgeVectorIndex(path, DIM).drop()
    assert (path / "edge_config.json").exists()
    script = (
        "import asyncio, sys; from pathlib import Path;"
        "from services.memory.adapters.vectors_edge import EdgeVectorIndex, ShardLockedError\n"
        "try:\n"
        f"    asyncio.run(EdgeVectorIndex(Path({str(path)!r}), {DIM}).ensure())\n"
        "except ShardLockedError:\n"
        "    sys.exit(3)\n"
    )
    assert await run_python(script) == 3
    await first.close()
    reopened = EdgeVectorIndex(path, DIM)  # lock released on close
    await reopened.ensure()
    await reopened.close()


async def test_edge_rejects_dimension_change(tmp_path: Path) -> None:
    path = tmp_path / "dims"
    idx = EdgeVectorIndex(path, DIM)
    await idx.ensure()
    await idx.close()
    other = EdgeVectorIndex(path, 8)
    with pytest.raises(RuntimeError, match="expected vector size 8"):
        await other.ensure()
    await other.close()


async def test_edge_optimize_keeps_results(tmp_path: Path, corpus_points: list[VectorPoint]) -> None:
    idx = EdgeVectorIndex(tmp_path / "opt", DIM)
    await idx.ensure()
    await idx.upsert(corpus_points)
    await idx.optimize()
    hits = await idx.search(
        dense=None,
        sparse=query_vector("zorblax"),
        filter=SearchFilter(tenant="alice"),
        limit=3,
        mode="sparse",
    )
    assert [ID_TO_KEY[h.id] for h in hits] == ["runner"]
    await idx.close()


async def test_edge_requires_ensure(tmp_path: Path) -> None:
    idx = EdgeVectorIndex(tmp_path / "lazy", DIM)
    with pytest.raises(RuntimeError, match="ensure"):
        await idx.count(SearchFilter(tenant="alice"))
    await idx.close()


async def test_factory_picks_adapter(tmp_path: Path) -> None:
    edge = build_vector_index(qdrant_url=None, path=tmp_path / "f1", dim=DIM)
    also_edge = build_vector_index(qdrant_url="", path=tmp_path / "f2", dim=DIM)
    local = build_vector_index(qdrant_url=":memory:", path=tmp_path / "unused", dim=DIM, collection="c")
    assert isinstance(edge, EdgeVectorIndex) and isinstance(also_edge, EdgeVectorIndex)
    assert isinstance(local, QdrantServerVectorIndex) and local.collection == "c"
    await local.ensure()
    assert await local.count(SearchFilter(tenant="x")) == 0
    for idx in (edge, also_edge, local):
        await idx.close()


async def test_edge_index_reports_when_an_optimisation_would_index(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import uuid as _uuid

    import numpy as _np

    from services.memory.adapters.vectors_edge import INDEXING_THRESHOLD_KB, EdgeVectorIndex
    from services.memory.domain.keywords import document_vector as _doc
    from services.memory.search.ports import VectorPoint as _Point

    index = EdgeVectorIndex(tmp_path / "shard", dim=8)
    await index.ensure()
    try:
        needed = INDEXING_THRESHOLD_KB * 1024 // (8 * 4) + 10
        rng = _np.random.default_rng(1)
        points = [
            _Point(id=str(_uuid.uuid4()), dense=(rng.standard_normal(8) / 3).tolist(), sparse=_doc(f"word {i}"),
                   payload={"tenant": "t"})
            for i in range(needed)
        ]
        await index.upsert(points[:100])
        assert index.unindexed_points() == 100 and not index.needs_optimize()
        await index.upsert(points[100:])
        assert index.needs_optimize()
        await index.optimize()
        assert not index.needs_optimize()
    finally:
        await index.close()


async def test_single_tenant_shard_skips_the_idf_count_with_identical_scores(
    tmp_path: Path, corpus_points: list[VectorPoint]
) -> None:
    """While one tenant owns every point, collection-wide IDF is used (no per-term count) and
    gives exactly the tenant-scoped scores; a second tenant switches back, also after a reopen."""
    alice = [p for p in corpus_points if p.payload["tenant"] == "alice"]
    index = EdgeVectorIndex(tmp_path / "shard", DIM)
    await index.ensure()

    async def scores() -> list[tuple[str, float]]:
        hits = await index.search(dense=None, sparse=query_vector("favourite drink tea zorblax runner"),
                                  filter=SearchFilter(tenant="alice"), limit=10, mode="sparse")
        return [(h.id, round(h.score, 5)) for h in hits]

    await index.upsert(alice)
    assert index._sparse_params(SearchFilter(tenant="alice")) is None
    assert index._sparse_params(SearchFilter(tenant="bob")) is not None
    fast = await scores()
    await index.upsert([VectorPoint(id=str(uuid.uuid4()), dense=[1.0] + [0.0] * (DIM - 1),
                                    sparse=document_vector("tea tea tea zorblax"), payload={"tenant": "mallory"})])
    assert index._sparse_params(SearchFilter(tenant="alice")) is not None
    assert await scores() == fast  # the scoped IDF gives what the fast path gave
    await index.close()
    reopened = EdgeVectorIndex(tmp_path / "shard", DIM)
    await reopened.ensure()
    assert reopened._sparse_params(SearchFilter(tenant="alice")) is not None
    await reopened.drop()
    await reopened.ensure()
    await reopened.upsert(alice)
    assert reopened._sparse_params(SearchFilter(tenant="alice")) is None
    await reopened.close()


async def test_a_qdrant_collection_belongs_to_one_install(corpus_points: list[VectorPoint]) -> None:
    """Two installs (namespaces) pointed at one collection: the second is refused with the fix,
    before it can write or, through a replay, drop anything; the owner itself reopens it."""
    client = AsyncQdrantClient(location=":memory:")
    legacy = QdrantServerVectorIndex(client, "memories", DIM)  # created before collections were claimed
    await legacy.ensure()
    await legacy.upsert(corpus_points)
    first = QdrantServerVectorIndex(client, "memories", DIM, owner="engram")
    await first.ensure()  # an unclaimed collection is adopted by the first install that opens it
    await first.ensure()
    other = QdrantServerVectorIndex(client, "memories", DIM, owner="staging")
    with pytest.raises(CollectionOwnedElsewhere) as refused:
        await other.ensure()
    message = str(refused.value)
    assert "'engram'" in message and "'staging'" in message and "ENGRAM_QDRANT_COLLECTION" in message
    assert await first.count(SearchFilter(tenant="alice")) == count_of("alice")  # nothing touched
    await first.drop()
    await first.ensure()  # rebuilt (replay): claimed again, still refused to the other install
    with pytest.raises(CollectionOwnedElsewhere):
        await other.ensure()
    elsewhere = QdrantServerVectorIndex(client, "staging-memories", DIM, owner="staging")
    await elsewhere.ensure()  # its own collection is fine
    await client.close()


def _small_points(n: int, start: int = 0) -> list[VectorPoint]:
    return [VectorPoint(str(uuid.UUID(int=start + i + 1)), [1.0, 0.0, 0.0, float(start + i)],
                        document_vector("flush test"), {"tenant": "t", "status": "active"}) for i in range(n)]


async def test_edge_flushes_after_enough_points_written(tmp_path: Path) -> None:
    """The WAL is bounded: past ``flush_every_points`` written since the last flush, the write flushes."""
    idx = EdgeVectorIndex(tmp_path / "flush", 4, flush_every_points=50, flush_every_s=3600)
    await idx.ensure()
    await idx.upsert(_small_points(40))
    assert (idx.flushes, idx.unflushed_points) == (0, 40)
    assert not await idx.flush_if_due()  # an hour has not passed
    await idx.upsert(_small_points(100, start=40))  # through the worker thread, in chunks
    assert (idx.flushes, idx.unflushed_points) == (1, 0)
    await idx.set_payload([str(uuid.UUID(int=1))], {"status": "forgotten"})
    await idx.delete([str(uuid.UUID(int=2))])
    assert idx.unflushed_points == 2
    await idx.optimize()  # persists what it optimised
    assert (idx.flushes, idx.unflushed_points) == (2, 0)
    await idx.close()


async def test_edge_flushes_on_schedule_when_writes_are_pending(tmp_path: Path) -> None:
    idx = EdgeVectorIndex(tmp_path / "due", 4, flush_every_points=10_000, flush_every_s=1e-9)
    await idx.ensure()
    assert not await idx.flush_if_due()  # nothing written: nothing to flush
    await idx.upsert(_small_points(3))
    assert await idx.flush_if_due()
    assert (idx.flushes, idx.unflushed_points) == (1, 0)
    assert not await idx.flush_if_due()
    with pytest.raises(ValueError):
        EdgeVectorIndex(tmp_path / "bad", 4, flush_every_points=0)
    await idx.close()


async def test_edge_flushed_shard_survives_a_crash_with_later_writes(tmp_path: Path) -> None:
    """Points flushed (segments persisted, the WAL truncated) and points written after the last flush
    (in the WAL only) are all there after a crash."""
    path = tmp_path / "crash-flushed"
    script = f"""
import asyncio, os, uuid
from pathlib import Path
from services.memory.search.ports import VectorPoint
from services.memory.adapters.vectors_edge import EdgeVectorIndex
from services.memory.domain.keywords import document_vector
async def main():
    idx = EdgeVectorIndex(Path({str(path)!r}), 4, flush_every_points=100)
    await idx.ensure()
    for start in range(0, 250, 50):
        await idx.upsert([VectorPoint(str(uuid.UUID(int=start + i + 1)), [1.0, 0.0, 0.0, float(i)],
                                      document_vector("crash test"), {{"tenant": "t", "status": "active"}})
                                      for i in range(50)])
    assert idx.flushes == 2 and idx.unflushed_points == 50, (idx.flushes, idx.unflushed_points)
    os._exit(0)  # no close
asyncio.run(main())
"""
    assert await run_python(script) == 0
    idx = EdgeVectorIndex(path, 4)
    await idx.ensure()
    assert await idx.count(SearchFilter(tenant="t")) == 250
    await idx.close()


async def test_points_stored_dense_vectors_and_fields_and_searches_without_payloads(
    index: VectorIndex, corpus_points: list[VectorPoint]
) -> None:
    """``stored_dense`` gives back the vectors points were written with and the payload fields asked
    for (what the neighbours query reads instead of the read model), leaving out ids it does not
    hold; a dense search asked without payloads finds the same ids with the same scores, and
    ``nearest`` runs several such searches in one batch, each within its own filter."""
    tea = next(p for p in corpus_points if p.id == BY_KEY["tea"].id)
    other = next(p for p in corpus_points if p.payload["tenant"] != "alice")
    unknown = str(uuid.uuid4())
    stored = await index.stored_dense([tea.id, unknown, other.id], ["tenant", "project"])
    assert set(stored) == {tea.id, other.id}
    vector, fields = stored[tea.id]
    assert fields == {"tenant": "alice", "project": "home"}
    assert np.allclose(vector, np.asarray(tea.dense) / np.linalg.norm(tea.dense), atol=1e-5)
    assert stored[other.id][1]["tenant"] == other.payload["tenant"]
    assert await index.stored_dense([unknown], ["tenant"]) == {} and await index.stored_dense([], ["tenant"]) == {}
    flt = SearchFilter(tenant="alice", project="home")
    full = await index.search(dense=vector, sparse=None, filter=flt, limit=5, mode="dense")
    bare = await index.search(dense=vector, sparse=None, filter=flt, limit=5, mode="dense", with_payload=False)
    assert [h.id for h in bare] == [h.id for h in full] and full[0].id == tea.id
    assert [round(h.score, 5) for h in bare] == [round(h.score, 5) for h in full]
    assert all(h.payload == {} for h in bare) and all(h.payload for h in full)

    other_flt = SearchFilter(tenant=str(other.payload["tenant"]))
    alone = await index.search(dense=stored[other.id][0], sparse=None, filter=other_flt, limit=3, mode="dense")
    batch = await index.nearest([(vector, flt), (stored[other.id][0], other_flt), (vector, other_flt)], 5)
    assert [[h.id for h in hits] for hits in batch[:1]] == [[h.id for h in full]]
    assert [round(h.score, 5) for h in batch[0]] == [round(h.score, 5) for h in full]
    assert [h.id for h in batch[1][:3]] == [h.id for h in alone] and batch[1][0].id == other.id
    assert tea.id not in {h.id for h in batch[2]}  # each query keeps to its own filter (tenant)
    assert all(h.payload == {} for hits in batch for h in hits)
    assert await index.nearest([], 5) == []
