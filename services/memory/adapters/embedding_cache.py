"""The embedding cache in Postgres (the port: :class:`services.memory.search.ports.EmbeddingCacheStore`).

One table in the memory schema, ``embedding_cache (model, digest, value)`` (migration
``0008_embedding_cache.sql``), read with one indexed query per batch and written with one
``INSERT ... ON CONFLICT DO NOTHING``. Why Postgres and not a local file store:

* every replica of the memory service, and ``engram replay`` run from another machine, shares it
  (a file store would be per pod and empty after a reschedule, which is when a replay runs);
* it is backed up and restored with the read models it serves, and needs no new dependency;
* measured (docs/benchmarks-log.md, "Replay at scale"): a batch of 256 memories is one round trip.

It is a cache: a replay leaves it alone (not a projection of the event log), and
``TRUNCATE <schema>.embedding_cache`` at any time only costs re-embedding. Its keys name no user:
a purge deletes the digests of the user's texts under every model (:meth:`PgEmbeddingCache.delete_digests`).

It is bounded (``ENGRAM_EMBEDDING_CACHE_MAX_ENTRIES``, :data:`DEFAULT_MAX_ENTRIES`): after every
``trim_every`` entries this process wrote, :meth:`PgEmbeddingCache.trim` deletes the oldest added
past the bound (first in, first out: a lookup does not refresh an entry, so reads stay reads). A
memory leaves ~4-6 entries (its sentences' vectors, its packed late tokens, and after a replay its
dense and keyword vectors), ~17 KiB in all (docs/scaling.md), so the default keeps the last
~200,000 memories' worth, ~3.5 GB. What was evicted is recomputed when next needed (a replay
re-embeds those memories).
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from services.memory.search.ports import EmbeddingCacheStore

__all__ = ["DEFAULT_MAX_ENTRIES", "PgEmbeddingCache"]

#: Entries the cache keeps by default (``ENGRAM_EMBEDDING_CACHE_MAX_ENTRIES``).
DEFAULT_MAX_ENTRIES = 1_000_000


class PgEmbeddingCache(EmbeddingCacheStore):
    """``(model, sha256) -> bytes`` in ``<schema>.embedding_cache`` (created by the memory store's
    migrations), at most ``max_entries`` of them (0: no bound) once trimmed; a trim runs after every
    ``trim_every`` entries written (default: a hundredth of the bound, at least 1,000)."""

    def __init__(self, pool: asyncpg.Pool, schema: str, *, max_entries: int = DEFAULT_MAX_ENTRIES,
                 trim_every: int | None = None) -> None:
        if max_entries < 0:
            raise ValueError("max_entries must be 0 (no bound) or positive")
        self.pool = pool
        self.s = schema
        self.max_entries = max_entries
        self.trim_every = trim_every if trim_every is not None else max(1_000, max_entries // 100)
        self._written = 0  # entries written since the last trim
        #: entries this process's trims deleted
        self.evicted = 0

    async def get_many(self, keys: Sequence[tuple[str, bytes]]) -> dict[tuple[str, bytes], bytes]:
        """Present values of ``keys``, one query (a join on the primary key)."""
        if not keys:
            return {}
        rows = await self.pool.fetch(
            f"""SELECT c.model, c.digest, c.value
                FROM unnest($1::text[], $2::bytea[]) AS k(model, digest)
                JOIN {self.s}.embedding_cache c ON c.model = k.model AND c.digest = k.digest""",
            [k[0] for k in keys], [k[1] for k in keys],
        )
        return {(r["model"], bytes(r["digest"])): bytes(r["value"]) for r in rows}

    async def put_many(self, items: Sequence[tuple[str, bytes, bytes]]) -> None:
        """Store new items (one statement); an existing key keeps its value."""
        if not items:
            return
        unique = {(m, d): v for m, d, v in items}
        status = await self.pool.execute(
            f"""INSERT INTO {self.s}.embedding_cache (model, digest, value)
                SELECT * FROM unnest($1::text[], $2::bytea[], $3::bytea[])
                ON CONFLICT (model, digest) DO NOTHING""",
            [k[0] for k in unique], [k[1] for k in unique], list(unique.values()),
        )
        self._written += int(status.split()[-1])
        if self.max_entries and self._written >= self.trim_every:
            await self.trim()

    async def trim(self) -> int:
        """Delete the oldest added entries past ``max_entries`` (entries from before the bound
        existed first); how many. One count and one delete by the ``added_at`` index."""
        self._written = 0
        if not self.max_entries:
            return 0
        status = await self.pool.execute(
            f"""DELETE FROM {self.s}.embedding_cache c
                USING (SELECT model, digest FROM {self.s}.embedding_cache
                       ORDER BY added_at NULLS FIRST
                       LIMIT greatest(0, (SELECT count(*) FROM {self.s}.embedding_cache) - $1)) old
                WHERE c.model = old.model AND c.digest = old.digest""",
            self.max_entries,
        )
        deleted = int(status.split()[-1])
        self.evicted += deleted
        return deleted

    async def delete_digests(self, digests: Sequence[bytes]) -> int:
        """Delete ``digests`` under every model, in one statement: the models present are found by
        a loose index scan of the primary key (a handful: embedders, recipes), then each
        (model, digest) pair is deleted by the key, never by a scan of the table."""
        if not digests:
            return 0
        status = await self.pool.execute(
            f"""WITH RECURSIVE models AS (
                    (SELECT model FROM {self.s}.embedding_cache ORDER BY model LIMIT 1)
                    UNION ALL
                    SELECT (SELECT c.model FROM {self.s}.embedding_cache c WHERE c.model > m.model
                            ORDER BY c.model LIMIT 1)
                    FROM models m WHERE m.model IS NOT NULL)
                DELETE FROM {self.s}.embedding_cache c
                USING models m, unnest($1::bytea[]) AS d(digest)
                WHERE c.model = m.model AND c.digest = d.digest""",
            list(dict.fromkeys(digests)),
        )
        return int(status.split()[-1])

    async def count(self) -> int:
        """How many entries the cache holds."""
        return int(await self.pool.fetchval(f"SELECT count(*) FROM {self.s}.embedding_cache"))

    async def clear(self) -> None:
        """Forget everything (a cache: only costs re-embedding)."""
        await self.pool.execute(f"TRUNCATE {self.s}.embedding_cache")
