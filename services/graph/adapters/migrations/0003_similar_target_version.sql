-- A ``similar`` edge's weight is the similarity of its two memories' texts at the time it was
-- found: ``target_version`` is the target memory's version it was computed against (NULL for other
-- edge types and for edges found before this column). When a memory changes, its round replaces
-- the edges into it that an older version of it earned (services/graph/adapters/pg_store.py
-- ``set_similar``): re-weighed where its new neighbours take it again, else removed.
ALTER TABLE {schema}.edges ADD COLUMN target_version int;
