-- A memory's token vectors for late-interaction recall (services/memory/application/late.py):
-- int8 rows with per-row scales, ~10-50 KB per memory. Read only for a recall's best candidates,
-- never by the views; stored out of line and uncompressed (int8 vectors do not compress).
-- NULL: not computed (late interaction off when the memory was written, or not active).
ALTER TABLE {schema}.memories ADD COLUMN late_tokens bytea;
ALTER TABLE {schema}.memories ALTER COLUMN late_tokens SET STORAGE EXTERNAL;
