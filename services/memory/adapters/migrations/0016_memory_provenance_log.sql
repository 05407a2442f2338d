-- The memories learnt from a daily log (docs/daily-logs.md, "A log saved without some of its turns"):
-- a save that removes turns from a log looks up the current memories its provenance names.
CREATE INDEX memories_provenance_log ON {schema}.memories (tenant, (provenance->>'log_id'))
    WHERE provenance IS NOT NULL AND status = 'active';
