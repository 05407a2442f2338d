-- The command log kept by kit's service skeleton in every service schema that handles commands:
-- one row per (tenant, operation, client idempotency key), identified by their digest
-- (contracts.messages.scoped_command_id), with a fingerprint of the request it answered.
CREATE TABLE {schema}.command_outcomes (
    command_id  text PRIMARY KEY,
    tenant      text NOT NULL,
    operation   text NOT NULL,
    key         text NOT NULL,
    fingerprint text NOT NULL,
    outcome     jsonb NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
