-- Users who sign in with a password, and the OAuth 2.1 authorization server's state.
-- Every secret (client secret, code, access/refresh token, session) is stored as a SHA-256 hash.

ALTER TABLE {schema}.users ADD COLUMN username text, ADD COLUMN password_hash text;
CREATE UNIQUE INDEX users_username ON {schema}.users (lower(username)) WHERE username IS NOT NULL;

CREATE TABLE {schema}.oauth_clients (
    client_id    text PRIMARY KEY,
    metadata     jsonb NOT NULL,          -- RFC 7591 client information, without the secret
    secret_hash  text,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- An authorization request between /authorize and the consent page.
CREATE TABLE {schema}.oauth_requests (
    id                     text PRIMARY KEY,
    client_id              text NOT NULL REFERENCES {schema}.oauth_clients(client_id) ON DELETE CASCADE,
    redirect_uri           text NOT NULL,
    redirect_uri_explicit  boolean NOT NULL,
    scopes                 text[] NOT NULL,
    code_challenge         text NOT NULL,
    state                  text,
    resource               text NOT NULL,
    created_at             timestamptz NOT NULL DEFAULT now(),
    expires_at             timestamptz NOT NULL,
    completed_at           timestamptz
);

-- A grant: what one user allowed one client. All tokens descend from it (one token family).
CREATE TABLE {schema}.oauth_grants (
    id              uuid PRIMARY KEY,
    client_id       text NOT NULL REFERENCES {schema}.oauth_clients(client_id) ON DELETE CASCADE,
    user_id         text NOT NULL REFERENCES {schema}.users(id),
    scopes          text[] NOT NULL,
    resource        text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    revoked_at      timestamptz,
    revoked_reason  text
);
CREATE INDEX oauth_grants_user ON {schema}.oauth_grants (user_id);

CREATE TABLE {schema}.oauth_codes (
    code_hash              text PRIMARY KEY,
    client_id              text NOT NULL REFERENCES {schema}.oauth_clients(client_id) ON DELETE CASCADE,
    user_id                text NOT NULL REFERENCES {schema}.users(id),
    redirect_uri           text NOT NULL,
    redirect_uri_explicit  boolean NOT NULL,
    scopes                 text[] NOT NULL,
    code_challenge         text NOT NULL,
    resource               text NOT NULL,
    created_at             timestamptz NOT NULL DEFAULT now(),
    expires_at             timestamptz NOT NULL,
    used_at                timestamptz,
    grant_id               uuid REFERENCES {schema}.oauth_grants(id)
);

CREATE TABLE {schema}.oauth_access_tokens (
    token_hash  text PRIMARY KEY,
    grant_id    uuid NOT NULL REFERENCES {schema}.oauth_grants(id) ON DELETE CASCADE,
    scopes      text[] NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX oauth_access_tokens_grant ON {schema}.oauth_access_tokens (grant_id);

CREATE TABLE {schema}.oauth_refresh_tokens (
    token_hash  text PRIMARY KEY,
    grant_id    uuid NOT NULL REFERENCES {schema}.oauth_grants(id) ON DELETE CASCADE,
    scopes      text[] NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    rotated_at  timestamptz
);
CREATE INDEX oauth_refresh_tokens_grant ON {schema}.oauth_refresh_tokens (grant_id);

CREATE TABLE {schema}.sessions (
    id_hash     text PRIMARY KEY,
    user_id     text NOT NULL REFERENCES {schema}.users(id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);

-- Failed sign-ins per (username, address) and per address, for back-off.
CREATE TABLE {schema}.login_failures (
    key              text PRIMARY KEY,
    failures         int NOT NULL,
    first_failed_at  timestamptz NOT NULL,
    locked_until     timestamptz
);
