-- Who "my sister" is (docs/recall-quality.md, "Aliases"): the keys ("<whose>|<relation>") of the
-- aliases a memory's words state ("My sister Ana …" → "|sister"), written with its row by the
-- projection and a replay. Memories projected before this migration have none until
-- `engram replay memory` rewrites their rows.
ALTER TABLE {schema}.memories ADD COLUMN alias_keys text[];
CREATE INDEX memories_alias_keys ON {schema}.memories USING gin (alias_keys) WHERE status = 'active';
