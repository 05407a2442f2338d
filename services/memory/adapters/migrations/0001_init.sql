CREATE TABLE {schema}.memories (
    id            uuid PRIMARY KEY,
    tenant        text NOT NULL,
    project       text NOT NULL,
    content       text NOT NULL,
    content_hash  text NOT NULL,
    category      text,
    memory_key    text,
    importance    smallint NOT NULL,
    confidence    real NOT NULL,
    source        text NOT NULL,
    version       integer NOT NULL,
    status        text NOT NULL,
    forget_reason text,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    last_seq      bigint NOT NULL
);
CREATE INDEX memories_tenant_project ON {schema}.memories (tenant, project, status);
CREATE INDEX memories_content ON {schema}.memories (tenant, project, content_hash) WHERE status = 'active';

CREATE TABLE {schema}.command_log (
    tenant      text NOT NULL,
    command_id  text NOT NULL,
    type        text NOT NULL,
    outcome     jsonb NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, command_id)
);

CREATE TABLE {schema}.checkpoints (
    projection  text PRIMARY KEY,
    last_seq    bigint NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
