-- Tenants seen in daily-log events: the recover-stuck and retention schedules run per tenant
-- (the lifecycle commands have no system-wide form). Rebuilt from the event log by
-- `engram replay extractor`.
CREATE TABLE IF NOT EXISTS {schema}.tenants (
    tenant      text PRIMARY KEY,
    first_seen  timestamptz NOT NULL DEFAULT now()
);
