-- Whose memories each embedding cache entry was derived from (services/memory/adapters/embedding_cache.py).
-- The cache is keyed by text, not by user: a purge finds the entries of a user's current memories
-- from their rows, and the entries of texts those memories held before (versions since updated or
-- forgotten, whose events the purge has already removed) from here. Written in the projection's
-- transaction, for every memory version projected; a purge deletes the rows with the user's others.
CREATE TABLE {schema}.embedding_cache_owners (
    tenant  text NOT NULL,
    digest  bytea NOT NULL,
    PRIMARY KEY (tenant, digest)
);
