-- The embedding cache (services/memory/adapters/embedding_cache.py): what a model made of a text,
-- keyed by (model, SHA-256 of the text), so that a replay or a re-extraction never embeds
-- unchanged text again. A cache, never the source of truth: a miss recomputes, the table may be
-- emptied at any time, and a replay does not drop it (it is not a projection of the event log).
-- ``value``: a sentence vector (384 float32) or a memory's packed late-interaction token rows.
CREATE TABLE {schema}.embedding_cache (
    model   text NOT NULL,
    digest  bytea NOT NULL,
    value   bytea NOT NULL,
    PRIMARY KEY (model, digest)
);
ALTER TABLE {schema}.embedding_cache ALTER COLUMN value SET STORAGE EXTERNAL;
