-- Nodes by (tenant, project, type), kept by the projection in the same transaction as the nodes:
-- a page's total without a time filter is a sum over a few rows instead of a count over the graph.
CREATE TABLE {schema}.node_counts (
    tenant   text   NOT NULL,
    project  text   NOT NULL,
    type     text   NOT NULL,
    n        bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, project, type)
);
INSERT INTO {schema}.node_counts (tenant, project, type, n)
    SELECT tenant, project, type, count(*) FROM {schema}.nodes GROUP BY tenant, project, type;
