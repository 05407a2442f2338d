"""Vector index on a Qdrant server (or qdrant-client's in-process local mode).

Same schema and search semantics as the embedded adapter (see
:mod:`services.memory.adapters.vectors`). Notes:

* All writes use ``wait=True``: when a call returns, the change is visible to
  searches (read-your-writes, which the memory service relies on).
* Hybrid search is one ``query_points`` call: a dense and a sparse
  ``Prefetch`` (each with the filter), fused by ``FusionQuery(Fusion.RRF)``
  (server default ``k = 2``, the value the embedded adapter uses too), which
  also returns the hits' keyword vectors when asked (``with_keywords``).
* In local mode (``AsyncQdrantClient(location=":memory:")`` or a path)
  payload indexes have no effect; creating them is skipped there without the
  client's warning. Searches are exact in local mode.
* ``tenant_scoped_idf`` sends ``SearchParams(idf=IdfCorpusParams(corpus=tenant))``
  with keyword searches; it needs a server that knows IDF corpus scoping (or
  local mode). Pass ``tenant_scoped_idf=False`` for older servers (IDF is then
  collection-wide).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import UnexpectedResponse
from qdrant_client.local.async_qdrant_local import AsyncQdrantLocal

from services.memory.adapters.vectors import (
    DENSE_VECTOR,
    KEYWORD_FIELDS,
    SPARSE_VECTOR,
    TENANT_FIELD,
    as_float_list,
    default_prefetch_limit,
    validate_search,
)
from services.memory.search.ports import (
    FINGERPRINT_FIELD,
    SearchFilter,
    SearchHit,
    SearchMode,
    SparseVector,
    VectorIndex,
    VectorPoint,
)

__all__ = ["QdrantServerVectorIndex"]


#: The id of the point that records which install owns a collection (see ``ensure``).
OWNER_POINT_ID = str(uuid.uuid5(uuid.NAMESPACE_URL, "engram:collection-owner"))
OWNER_FIELD = "engram_owner"


class CollectionOwnedElsewhere(RuntimeError):
    """The collection belongs to another Engram install (another namespace)."""


class QdrantServerVectorIndex(VectorIndex):
    """:class:`~services.memory.search.ports.VectorIndex` on a Qdrant
    collection reached through ``qdrant_client.AsyncQdrantClient``.

    The index owns ``client`` and closes it in :meth:`close`. ``ensure()``
    creates the collection and its payload indexes when missing (tolerating a
    concurrent creator) and checks that an existing collection has the
    expected vectors. With ``owner`` (the install's namespace) it also claims
    the collection: a marker point (no tenant, so no search or count ever
    sees it) records the first owner, and an install of another namespace is
    refused — two installs sharing a collection would mix their vectors, and
    a replay of one would drop the other's.
    """

    def __init__(
        self,
        client: AsyncQdrantClient,
        collection: str,
        dim: int,
        *,
        tenant_scoped_idf: bool = True,
        owner: str | None = None,
    ) -> None:
        if dim <= 0:
            raise ValueError("dim must be positive")
        self.client = client
        self.collection = collection
        self.dim = dim
        self.owner = owner
        self.tenant_scoped_idf = tenant_scoped_idf

    @property
    def _is_local(self) -> bool:
        return isinstance(getattr(self.client, "_client", None), AsyncQdrantLocal)

    # --- lifecycle ---------------------------------------------------------

    async def ensure(self) -> None:
        """Create the collection and payload indexes if missing. Idempotent."""
        if not await self.client.collection_exists(self.collection):
            try:
                await self.client.create_collection(
                    self.collection,
                    vectors_config={
                        DENSE_VECTOR: qm.VectorParams(size=self.dim, distance=qm.Distance.COSINE)
                    },
                    sparse_vectors_config={SPARSE_VECTOR: qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
                )
            except (UnexpectedResponse, ValueError):
                # Lost a creation race against another process: fine if it now exists.
                if not await self.client.collection_exists(self.collection):
                    raise
        info = await self.client.get_collection(self.collection)
        self._check_schema(info)
        if self.owner is not None:
            await self._claim(self.owner)
        if self._is_local:
            return  # payload indexes are a no-op in local mode
        existing = set(info.payload_schema or {})
        for name in KEYWORD_FIELDS:
            if name in existing:
                continue
            schema: Any = (
                qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, is_tenant=True)
                if name == TENANT_FIELD
                else qm.PayloadSchemaType.KEYWORD
            )
            await self.client.create_payload_index(self.collection, name, field_schema=schema, wait=True)

    async def _claim(self, owner: str) -> None:
        """Record ``owner`` on a collection nobody owns yet; refuse one another install owns."""
        current = await self._owner()
        if current is None:
            marker = qm.PointStruct(
                id=OWNER_POINT_ID,
                vector={DENSE_VECTOR: [1.0] + [0.0] * (self.dim - 1), SPARSE_VECTOR: qm.SparseVector(indices=[], values=[])},
                payload={OWNER_FIELD: owner},
            )
            await self.client.upsert(self.collection, points=[marker], wait=True)
            current = await self._owner()  # two installs claiming at once: the last write wins
        if current != owner:
            raise CollectionOwnedElsewhere(
                f"Qdrant collection {self.collection!r} belongs to the Engram install with namespace "
                f"{current!r}, not to this one ({owner!r}): two installs in one collection would mix their "
                f"memories, and a replay of one would erase the other's. Give this install a collection of "
                f"its own (ENGRAM_QDRANT_COLLECTION), or set ENGRAM_NAMESPACE={current} if it really is that install."
            )

    async def _owner(self) -> str | None:
        found = await self.client.retrieve(self.collection, ids=[OWNER_POINT_ID], with_payload=[OWNER_FIELD])
        return str(found[0].payload[OWNER_FIELD]) if found and found[0].payload else None

    def _check_schema(self, info: qm.CollectionInfo) -> None:
        vectors = info.config.params.vectors
        params = vectors.get(DENSE_VECTOR) if isinstance(vectors, dict) else None
        if params is None or params.size != self.dim:
            found = params.size if params is not None else None
            raise RuntimeError(
                f"collection {self.collection!r} has no {DENSE_VECTOR!r} vector of size {self.dim} "
                f"(found {found}); stop the memory service and run `engram replay memory --rebuild-index`"
            )
        sparse = info.config.params.sparse_vectors or {}
        if SPARSE_VECTOR not in sparse:
            raise RuntimeError(f"collection {self.collection!r} has no sparse vector {SPARSE_VECTOR!r}")

    async def drop(self) -> None:
        """Delete the collection; ``ensure()`` recreates it empty."""
        if await self.client.collection_exists(self.collection):
            await self.client.delete_collection(self.collection)

    async def close(self) -> None:
        """Close the client (and its connections)."""
        await self.client.close()

    # --- writes ------------------------------------------------------------

    def _to_point(self, point: VectorPoint) -> qm.PointStruct:
        dense = as_float_list(point.dense)
        if len(dense) != self.dim:
            raise ValueError(
                f"point {point.id}: dense vector has {len(dense)} dimensions, index has {self.dim}"
            )
        vector: dict[str, Any] = {DENSE_VECTOR: dense}
        if not point.sparse.is_empty:
            vector[SPARSE_VECTOR] = qm.SparseVector(
                indices=list(point.sparse.indices), values=list(point.sparse.values)
            )
        return qm.PointStruct(id=point.id, vector=vector, payload=dict(point.payload))

    async def upsert(self, points: Sequence[VectorPoint]) -> None:
        """Insert or replace points (same id -> replaced, vectors and payload)."""
        if not points:
            return
        await self.client.upsert(self.collection, points=[self._to_point(p) for p in points], wait=True)

    async def delete(self, ids: Sequence[str]) -> None:
        """Delete points by id; unknown ids are ignored."""
        if not ids:
            return
        selector = qm.PointIdsList(points=[str(uuid.UUID(i)) for i in ids])
        await self.client.delete(self.collection, points_selector=selector, wait=True)

    async def delete_tenant(self, tenant: str) -> None:
        """Delete every point of ``tenant`` (one filtered delete; the owner marker has no tenant)."""
        flt = qm.Filter(must=[qm.FieldCondition(key=TENANT_FIELD, match=qm.MatchValue(value=tenant))])
        await self.client.delete(self.collection, points_selector=qm.FilterSelector(filter=flt), wait=True)

    async def set_payload(self, ids: Sequence[str], payload: dict[str, Any]) -> None:
        """Merge ``payload`` into the points' payloads. Changing ``tenant`` is refused."""
        if TENANT_FIELD in payload:
            raise ValueError("set_payload cannot change a point's tenant; re-upsert it instead")
        if not ids or not payload:
            return
        await self.client.set_payload(
            self.collection, payload=dict(payload), points=[str(uuid.UUID(i)) for i in ids], wait=True
        )

    # --- reads -------------------------------------------------------------

    @staticmethod
    def _filter(search_filter: SearchFilter) -> qm.Filter:
        return qm.Filter(
            must=[
                qm.FieldCondition(key=key, match=qm.MatchValue(value=value))
                for key, value in search_filter.conditions().items()
            ]
        )

    def _sparse_params(self, search_filter: SearchFilter) -> qm.SearchParams | None:
        if not self.tenant_scoped_idf:
            return None
        tenant_only = qm.Filter(
            must=[qm.FieldCondition(key=TENANT_FIELD, match=qm.MatchValue(value=search_filter.tenant))]
        )
        return qm.SearchParams(idf=qm.IdfCorpusParams(corpus=tenant_only))

    async def search(
        self,
        *,
        dense: Sequence[float] | None,
        sparse: SparseVector | None,
        filter: SearchFilter,
        limit: int,
        mode: SearchMode = "hybrid",
        prefetch_limit: int | None = None,
        with_keywords: bool = False,
        with_payload: bool = True,
    ) -> list[SearchHit]:
        """Search within ``filter`` (tenant always applied); see the port docs."""
        validate_search(dense=dense, sparse=sparse, filter=filter, limit=limit, mode=mode, dim=self.dim)
        flt = self._filter(filter)
        dense_query = as_float_list(dense) if dense is not None else None
        pl = prefetch_limit if prefetch_limit is not None else default_prefetch_limit(limit)

        async def query(keywords: SparseVector | None, size: int, with_keywords: bool) -> list[qm.ScoredPoint]:
            sparse_query = (
                qm.SparseVector(indices=list(keywords.indices), values=list(keywords.values))
                if keywords is not None and not keywords.is_empty
                else None
            )
            vectors: list[str] | bool = [SPARSE_VECTOR] if with_keywords else False
            if mode == "dense":
                response = await self.client.query_points(
                    self.collection, query=dense_query, using=DENSE_VECTOR, query_filter=flt,
                    limit=size, with_payload=with_payload,
                )
            elif mode == "sparse":
                response = await self.client.query_points(
                    self.collection, query=sparse_query, using=SPARSE_VECTOR, query_filter=flt,
                    search_params=self._sparse_params(filter), limit=size, with_payload=True,
                )
            else:
                prefetch = [qm.Prefetch(query=dense_query, using=DENSE_VECTOR, filter=flt, limit=pl)]
                if sparse_query is not None:
                    prefetch.append(
                        qm.Prefetch(
                            query=sparse_query, using=SPARSE_VECTOR, filter=flt,
                            params=self._sparse_params(filter), limit=pl,
                        )
                    )
                response = await self.client.query_points(
                    self.collection, prefetch=prefetch, query=qm.FusionQuery(fusion=qm.Fusion.RRF),
                    query_filter=flt, limit=size, with_payload=True, with_vectors=vectors,
                )
            return list(response.points)

        if mode == "sparse" and (sparse is None or sparse.is_empty):
            return []
        with_keywords = with_keywords and mode == "hybrid"
        points = await query(sparse, limit, with_keywords)
        return [
            SearchHit(id=str(uuid.UUID(str(p.id))), score=float(p.score), payload=dict(p.payload or {}),
                      keywords=self._keywords_of(p) if with_keywords else None)
            for p in points
        ]

    @staticmethod
    def _keywords_of(point: qm.ScoredPoint) -> SparseVector:
        """The stored keyword vector of a hit read with ``with_vectors`` (empty if it has none)."""
        vectors = point.vector if isinstance(point.vector, dict) else {}
        stored = vectors.get(SPARSE_VECTOR)
        if not isinstance(stored, qm.SparseVector):
            return SparseVector((), ())
        return SparseVector(tuple(stored.indices), tuple(stored.values))

    async def count(self, filter: SearchFilter) -> int:
        """Exact number of points matching ``filter``."""
        result = await self.client.count(self.collection, count_filter=self._filter(filter), exact=True)
        return int(result.count)

    async def stored_dense(self, ids: Sequence[str], fields: Sequence[str]) -> dict[str, tuple[list[float], dict[str, Any]]]:
        """Each point's stored dense vector and payload ``fields`` (one retrieve)."""
        if not ids:
            return {}
        found = await self.client.retrieve(self.collection, ids=list(ids), with_payload=list(fields),
                                           with_vectors=[DENSE_VECTOR])
        out: dict[str, tuple[list[float], dict[str, Any]]] = {}
        for record in found:
            vectors = record.vector
            if isinstance(vectors, dict) and isinstance(vectors.get(DENSE_VECTOR), list):
                out[str(uuid.UUID(str(record.id)))] = ([float(x) for x in vectors[DENSE_VECTOR]],
                                                       dict(record.payload or {}))
        return out

    async def nearest(self, queries: Sequence[tuple[Sequence[float], SearchFilter]], limit: int) -> list[list[SearchHit]]:
        """Dense searches without payloads as one ``query_batch_points`` (see the port docs)."""
        if not queries:
            return []
        for dense, flt in queries:
            validate_search(dense=dense, sparse=None, filter=flt, limit=limit, mode="dense", dim=self.dim)
        responses = await self.client.query_batch_points(self.collection, requests=[
            qm.QueryRequest(query=as_float_list(dense), using=DENSE_VECTOR, filter=self._filter(flt), limit=limit,
                            with_payload=False)
            for dense, flt in queries
        ])
        return [[SearchHit(id=str(uuid.UUID(str(p.id))), score=float(p.score), payload={}) for p in r.points]
                for r in responses]

    async def fingerprints(self, ids: Sequence[str]) -> dict[str, str | None]:
        """The stored fingerprint of each of ``ids`` the collection holds (one retrieve)."""
        if not ids:
            return {}
        found = await self.client.retrieve(self.collection, ids=list(ids), with_payload=[FINGERPRINT_FIELD],
                                           with_vectors=False)
        out: dict[str, str | None] = {}
        for record in found:
            value = (record.payload or {}).get(FINGERPRINT_FIELD)
            out[str(uuid.UUID(str(record.id)))] = str(value) if value is not None else None
        return out

    async def size(self) -> int:
        """How many memory points the collection holds (every tenant; the owner marker aside)."""
        result = await self.client.count(self.collection, exact=True)
        return max(0, int(result.count) - (1 if await self._owner() is not None else 0))

    async def point_ids(self) -> list[str]:
        """Every memory point's id (the owner marker aside), scrolled without payloads or vectors."""
        out: list[str] = []
        offset: Any = None
        while True:
            page, offset = await self.client.scroll(self.collection, limit=10_000, offset=offset,
                                                    with_payload=False, with_vectors=False)
            out += [pid for record in page if (pid := str(uuid.UUID(str(record.id)))) != OWNER_POINT_ID]
            if offset is None:
                return out
