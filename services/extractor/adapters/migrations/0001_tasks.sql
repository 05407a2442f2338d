-- One row per (log_id, task_id): the extractor's exactly-once ledger.
CREATE TABLE IF NOT EXISTS {schema}.tasks (
    log_id            text NOT NULL,
    task_id           text NOT NULL,
    tenant            text NOT NULL,
    status            text NOT NULL CHECK (status IN ('running', 'done', 'failed')),
    attempts          int NOT NULL DEFAULT 1,
    memory_ids        text[] NOT NULL DEFAULT '{}',
    facts             int NOT NULL DEFAULT 0,
    prompt_tokens     bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    error             text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (log_id, task_id)
);
CREATE INDEX IF NOT EXISTS tasks_status ON {schema}.tasks (status, updated_at);
