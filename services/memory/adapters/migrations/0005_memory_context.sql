-- A memory's context: where it came from (e.g. the message it answers), indexed for recall at a
-- lower weight and never part of its content. Kept here so that a new version (update_memory
-- without a context) carries it over.
ALTER TABLE {schema}.memories ADD COLUMN context text;
