CREATE TABLE {schema}.shared_memories (
    id          uuid PRIMARY KEY,
    tenant      text NOT NULL,
    title       text NOT NULL,
    event       text NOT NULL,
    importance  smallint NOT NULL,
    version     integer NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    last_seq    bigint NOT NULL
);
CREATE UNIQUE INDEX shared_memories_title ON {schema}.shared_memories (tenant, title);
CREATE INDEX shared_memories_recent ON {schema}.shared_memories (tenant, updated_at DESC);

CREATE INDEX memories_profile ON {schema}.memories (tenant, project, importance DESC, confidence DESC, updated_at DESC)
    WHERE status = 'active' AND category IS NOT NULL;
CREATE INDEX memories_recent ON {schema}.memories (tenant, updated_at DESC) WHERE status = 'active';
CREATE INDEX memories_key ON {schema}.memories (tenant, project, memory_key) WHERE memory_key IS NOT NULL;
