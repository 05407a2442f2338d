CREATE TABLE {schema}.users (
    id          text PRIMARY KEY,
    name        text NOT NULL,
    disabled    boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE {schema}.api_keys (
    id            uuid PRIMARY KEY,
    user_id       text NOT NULL REFERENCES {schema}.users(id),
    name          text NOT NULL,
    prefix        text NOT NULL,
    key_hash      text NOT NULL UNIQUE,
    scopes        text[] NOT NULL,
    project       text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    last_used_at  timestamptz,
    revoked_at    timestamptz
);
CREATE INDEX api_keys_user ON {schema}.api_keys (user_id);

CREATE TABLE {schema}.command_log (
    command_id  text PRIMARY KEY,
    type        text NOT NULL,
    outcome     jsonb NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
