-- Daily logs, extraction tasks and extraction results: read models of their aggregates on the
-- event log (rebuilt by replay). Each row keeps the aggregate's full state (``state``, the data of
-- its last event) beside the columns its queries filter on. A deleted log stays as a tombstone
-- (``deleted``), so that an older event delivered again cannot bring it back. Lock key spaces
-- (lock_aggregate): 2 logs, 3 tasks, 4 results.
CREATE TABLE {schema}.daily_logs (
    id                 uuid PRIMARY KEY,
    tenant             text NOT NULL,
    project            text NOT NULL,
    log_date           date NOT NULL,
    processing_status  text NOT NULL,
    retry_count        integer NOT NULL,
    claimed_at         timestamptz,
    deleted            boolean NOT NULL DEFAULT false,
    updated_at         timestamptz NOT NULL,
    last_seq           bigint NOT NULL,
    state              jsonb NOT NULL
);
CREATE INDEX daily_logs_queue ON {schema}.daily_logs (tenant, processing_status, log_date) WHERE NOT deleted;

CREATE TABLE {schema}.extraction_tasks (
    id          uuid PRIMARY KEY,
    tenant      text NOT NULL,
    task_id     text NOT NULL,
    project     text,
    status      text NOT NULL,
    updated_at  timestamptz NOT NULL,
    last_seq    bigint NOT NULL,
    state       jsonb NOT NULL
);
CREATE UNIQUE INDEX extraction_tasks_task ON {schema}.extraction_tasks (tenant, task_id);
CREATE INDEX extraction_tasks_recent ON {schema}.extraction_tasks (tenant, updated_at DESC);

CREATE TABLE {schema}.extraction_results (
    id          uuid PRIMARY KEY,
    tenant      text NOT NULL,
    project     text NOT NULL,
    log_id      uuid NOT NULL,
    task_id     text NOT NULL,
    updated_at  timestamptz NOT NULL,
    last_seq    bigint NOT NULL,
    state       jsonb NOT NULL
);
CREATE UNIQUE INDEX extraction_results_pair ON {schema}.extraction_results (tenant, log_id, task_id);
CREATE INDEX extraction_results_task ON {schema}.extraction_results (tenant, task_id);

-- provenance of extracted memories: {log_id, task_id, turns, log_date}
ALTER TABLE {schema}.memories ADD COLUMN provenance jsonb;
