-- One round trip to serialise the appliers of one aggregate and read the sequence its row
-- already reflects. The lock is transaction-scoped (key space: 0 memories, 1 shared memories);
-- the SELECT runs after it is granted and, the function being VOLATILE, with a fresh snapshot,
-- so it sees what the previous lock holder committed.
CREATE OR REPLACE FUNCTION {schema}.lock_aggregate(p_table regclass, p_space integer, p_id uuid)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    applied bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_id::text, p_space));
    EXECUTE format('SELECT last_seq FROM %s WHERE id = $1', p_table) INTO applied USING p_id;
    RETURN applied;
END
$$;
