-- Memories that stay true (docs/memory-truth.md): when a memory was said, until when it held, what
-- superseded it or it superseded, its flags, merged sayings, pin and expiry. One JSON column, read
-- back into the memory's state: these fields are absent from most memories, and queries filter on
-- status (now also 'superseded'), never inside this column.
ALTER TABLE {schema}.memories ADD COLUMN truth jsonb;
-- list_conflicts: the memories of a user carrying an open flag
CREATE INDEX memories_conflicts ON {schema}.memories (tenant) WHERE truth ? 'conflicts';
