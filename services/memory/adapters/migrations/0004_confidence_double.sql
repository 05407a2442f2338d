-- confidence was `real`: 0.8 read back as 0.800000011920929 (REST, MCP, and unlike the event
-- log and the vector payloads). Store it as the event states it; values stored as `real` are
-- rounded back to the 6 decimals a `real` holds.
ALTER TABLE {schema}.memories
    ALTER COLUMN confidence TYPE double precision USING round(confidence::numeric, 6)::double precision;
