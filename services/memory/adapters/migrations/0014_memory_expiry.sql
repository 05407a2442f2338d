-- The expiry round (services/memory/main.py, expire_supersessions) looks for current memories past
-- their forget_after that still hide what they superseded: few memories carry an expiry, so it
-- reads only those.
CREATE INDEX memories_expiring ON {schema}.memories (tenant) WHERE truth ? 'forget_after' AND status = 'active';
