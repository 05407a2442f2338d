-- The memory graph's read model (schema {schema}): nodes in a stable order, edges by node id,
-- what each aggregate's projection reflects, and the queue of memories whose neighbours are wanted.

-- a node's place in the order: given when the node is first projected, never changed
CREATE SEQUENCE {schema}.node_order;

CREATE TABLE {schema}.nodes (
    tenant      text        NOT NULL,
    id          text        NOT NULL,   -- memory uuid, 'log:<uuid>' or 'project:<name>'
    seq         bigint      NOT NULL,
    type        text        NOT NULL,
    project     text        NOT NULL,
    label       text        NOT NULL,
    forgotten   boolean     NOT NULL DEFAULT false,
    category    text,
    memory_key  text,
    family      text,
    log_id      text,                   -- a memory's provenance log (its node id)
    importance  int,
    version     int,
    expires_at  timestamptz,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    detail      jsonb       NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant, id)
);
CREATE UNIQUE INDEX nodes_order ON {schema}.nodes (tenant, seq);
CREATE INDEX nodes_project_order ON {schema}.nodes (tenant, project, seq);
CREATE INDEX nodes_family ON {schema}.nodes (tenant, project, family, seq) WHERE family IS NOT NULL;
CREATE INDEX nodes_log ON {schema}.nodes (tenant, log_id, seq) WHERE log_id IS NOT NULL;

CREATE TABLE {schema}.edges (
    tenant  text             NOT NULL,
    source  text             NOT NULL,
    target  text             NOT NULL,
    type    text             NOT NULL,
    weight  double precision,
    PRIMARY KEY (tenant, source, type, target)
);
CREATE INDEX edges_target ON {schema}.edges (tenant, target, type);

-- the stream sequence each aggregate's projection reflects (kept after a node is deleted, so that
-- a late older event cannot bring it back)
CREATE TABLE {schema}.applied (
    tenant    text   NOT NULL,
    key       text   NOT NULL,
    last_seq  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, key)
);

CREATE TABLE {schema}.checkpoints (
    projection  text        PRIMARY KEY,
    last_seq    bigint      NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE {schema}.similar_queue (
    tenant     text        NOT NULL,
    memory_id  text        NOT NULL,
    project    text        NOT NULL,
    version    int         NOT NULL,
    attempts   int         NOT NULL DEFAULT 0,
    next_at    timestamptz NOT NULL DEFAULT now(),
    queued_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, memory_id)
);
CREATE INDEX similar_queue_next ON {schema}.similar_queue (next_at);
