-- Where a memory came from (services/memory/domain/origin.py): ``imported`` is true when the last event of
-- the memory was appended by an import of an Engram export (its envelope's ``origin``), so that
-- GET /v1/memories?source=imported finds it; a replay sets it again from the same events.
ALTER TABLE {schema}.memories ADD COLUMN imported boolean NOT NULL DEFAULT false;
CREATE INDEX memories_imported ON {schema}.memories (tenant) WHERE imported;
