-- What "done" means in the ledger: a row is done for one pending episode of its log. `episode` is
-- the log's version at the pending event the task handled; a log that becomes pending again (re-queued,
-- re-saved with new content, deleted and saved again) is a later version: a new attempt of the same
-- task. Re-extraction under its own task id leaves it 0 (done once per task).
ALTER TABLE {schema}.tasks ADD COLUMN IF NOT EXISTS episode bigint NOT NULL DEFAULT 0;
