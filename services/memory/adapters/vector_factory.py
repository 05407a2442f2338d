"""Picks the vector-index adapter from configuration."""

from __future__ import annotations

from pathlib import Path

from services.memory.search.ports import VectorIndex


def build_vector_index(
    *,
    qdrant_url: str | None,
    path: Path,
    dim: int,
    collection: str = "memories",
    api_key: str | None = None,
    tenant_scoped_idf: bool = True,
    owner: str | None = None,
    search_threads: int | None = 1,
) -> VectorIndex:
    """Pick the adapter from configuration.

    * ``qdrant_url`` ``None`` or ``""`` - :class:`EdgeVectorIndex`, the embedded
      engine, storing its shard in ``path``;
    * ``":memory:"`` - :class:`QdrantServerVectorIndex` over qdrant-client's
      in-process local mode (tests, demos; nothing persisted);
    * any other value - :class:`QdrantServerVectorIndex` against that server URL
      (``api_key`` optional).

    ``tenant_scoped_idf=False`` falls back to collection-wide IDF, for Qdrant
    servers that predate IDF corpus scoping. ``owner`` (the install's namespace)
    claims a Qdrant server collection for one install (an embedded shard lives in
    the install's own folder and needs no claim). ``search_threads``: the embedded engine's
    search threads (``None``: one per CPU).
    """
    if not qdrant_url:
        from services.memory.adapters.vectors_edge import EdgeVectorIndex

        return EdgeVectorIndex(Path(path), dim, tenant_scoped_idf=tenant_scoped_idf, search_threads=search_threads)

    from qdrant_client import AsyncQdrantClient

    from services.memory.adapters.vectors_qdrant import QdrantServerVectorIndex

    if qdrant_url == ":memory:":
        client = AsyncQdrantClient(location=":memory:")
    else:
        client = AsyncQdrantClient(url=qdrant_url, api_key=api_key)
    return QdrantServerVectorIndex(client, collection, dim, tenant_scoped_idf=tenant_scoped_idf, owner=owner)
