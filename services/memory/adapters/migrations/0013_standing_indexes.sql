-- Recall and the profile as of a moment (pg_store.MemoryStore.standing) read the memories that stood
-- then in two orders; without these indexes each question as of a new moment sorted every row of the
-- user (40-100 ms at 100,000 memories). By last change (the "recent" order's part that has not
-- changed since the moment) and by weight (the profile's facts), current and superseded alike.
CREATE INDEX memories_standing_changed ON {schema}.memories (tenant, updated_at DESC)
    WHERE status IN ('active', 'superseded');
CREATE INDEX memories_standing_weight ON {schema}.memories (tenant, (importance * confidence) DESC, updated_at DESC)
    WHERE status IN ('active', 'superseded');
