-- The embedding cache is bounded (services/memory/adapters/embedding_cache.py, PgEmbeddingCache.trim):
-- past ENGRAM_EMBEDDING_CACHE_MAX_ENTRIES entries the oldest added go first. ``added_at`` is added
-- without a default first (no rewrite of a big table; the entries already there are NULL, the
-- oldest), then new entries get the time they were written.
ALTER TABLE {schema}.embedding_cache ADD COLUMN added_at timestamptz;
ALTER TABLE {schema}.embedding_cache ALTER COLUMN added_at SET DEFAULT clock_timestamp();
CREATE INDEX embedding_cache_added_at ON {schema}.embedding_cache (added_at NULLS FIRST);
