-- Extraction modes (contracts/extraction_modes.py): a project's own mode, projected from the
-- `extractionmode` events (rebuilt by `engram replay extractor`), and the pending logs the
-- pipeline left to agents (agent mode, or within the hand-off time), taken by its sweep once their
-- project's mode lets it claim them.
CREATE TABLE IF NOT EXISTS {schema}.project_modes (
    tenant      text NOT NULL,
    project     text NOT NULL,
    mode        text NOT NULL CHECK (mode IN ('auto', 'agent', 'handoff')),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, project)
);
CREATE TABLE IF NOT EXISTS {schema}.waiting (
    tenant         text NOT NULL,
    log_id         text NOT NULL,
    project        text NOT NULL,
    version        bigint NOT NULL,
    pending_since  timestamptz NOT NULL,
    PRIMARY KEY (tenant, log_id)
);
