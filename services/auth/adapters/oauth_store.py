"""Postgres store of the OAuth authorization server: users' logins, clients, requests, codes,
grants (token families), access and refresh tokens, browser sessions and sign-in failures.

Only hashes of secrets reach this module's tables. Every state change that must happen once
(using a code, rotating a refresh token, completing a request) is a conditional UPDATE, so two
racing requests cannot both win.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg

from contracts.auth import UserView


@dataclass(frozen=True)
class TokenRow:
    grant_id: UUID
    client_id: str
    user_id: str
    scopes: list[str]
    resource: str
    expires_at: datetime
    revoked: bool  # the grant was revoked
    user_disabled: bool
    rotated_at: datetime | None = None  # refresh tokens only
    user_name: str | None = None


@dataclass(frozen=True)
class LoginUser:
    user_id: str
    username: str
    password_hash: str | None
    disabled: bool


class OAuthStore:
    def __init__(self, pool: asyncpg.Pool, schema: str = "auth") -> None:
        self.pool = pool
        self.s = schema

    # users ---------------------------------------------------------------------------------
    async def create_login(
        self, *, user_id: str, username: str, password_hash: str, display_name: str | None, existing: bool
    ) -> UserView | None:
        """Create a user with a login, or give an existing user one. None: the username is taken
        (or the existing user was not found)."""
        async with self.pool.acquire() as conn, conn.transaction():
            taken = await conn.fetchval(
                f"SELECT id FROM {self.s}.users WHERE lower(username) = lower($1)", username
            )
            if taken is not None and taken != user_id:
                return None
            if existing:
                row = await conn.fetchrow(
                    f"""UPDATE {self.s}.users SET username = $2, password_hash = $3, name = coalesce($4, name)
                        WHERE id = $1 RETURNING id, username, name, disabled, created_at""",
                    user_id, username, password_hash, display_name,
                )
            else:
                row = await conn.fetchrow(
                    f"""INSERT INTO {self.s}.users (id, name, username, password_hash) VALUES ($1, $2, $3, $4)
                        ON CONFLICT (id) DO UPDATE SET username = excluded.username
                        RETURNING id, username, name, disabled, created_at""",
                    user_id, display_name or username, username, password_hash,
                )
            return _user(row) if row is not None else None

    async def login_user(self, username: str) -> LoginUser | None:
        row = await self.pool.fetchrow(
            f"SELECT id, username, password_hash, disabled FROM {self.s}.users WHERE lower(username) = lower($1)",
            username,
        )
        if row is None:
            return None
        return LoginUser(row["id"], row["username"], row["password_hash"], bool(row["disabled"]))

    async def set_password_hash(self, user_id: str, password_hash: str) -> None:
        await self.pool.execute(f"UPDATE {self.s}.users SET password_hash = $2 WHERE id = $1", user_id, password_hash)

    async def get_user(self, user_id: str) -> UserView | None:
        row = await self.pool.fetchrow(
            f"SELECT id, username, name, disabled, created_at FROM {self.s}.users WHERE id = $1", user_id
        )
        return _user(row) if row is not None else None

    async def list_users(self) -> list[UserView]:
        rows = await self.pool.fetch(
            f"SELECT id, username, name, disabled, created_at FROM {self.s}.users ORDER BY created_at"
        )
        return [_user(r) for r in rows]

    async def disable_user(self, user_id: str) -> tuple[UserView, list[UUID]] | None:
        """Disable the user, end their sessions and revoke their grants; returns the grants revoked."""
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                f"""UPDATE {self.s}.users SET disabled = true WHERE id = $1
                    RETURNING id, username, name, disabled, created_at""",
                user_id,
            )
            if row is None:
                return None
            await conn.execute(f"DELETE FROM {self.s}.sessions WHERE user_id = $1", user_id)
            grants = await conn.fetch(
                f"""UPDATE {self.s}.oauth_grants SET revoked_at = now(), revoked_reason = 'user disabled'
                    WHERE user_id = $1 AND revoked_at IS NULL RETURNING id""",
                user_id,
            )
            return _user(row), [g["id"] for g in grants]

    # clients -------------------------------------------------------------------------------
    async def save_client(self, client_id: str, metadata: dict[str, Any], secret_hash: str | None) -> None:
        await self.pool.execute(
            f"INSERT INTO {self.s}.oauth_clients (client_id, metadata, secret_hash) VALUES ($1, $2, $3)",
            client_id, json.dumps(metadata), secret_hash,
        )

    async def get_client(self, client_id: str) -> tuple[dict[str, Any], str | None] | None:
        row = await self.pool.fetchrow(
            f"SELECT metadata, secret_hash FROM {self.s}.oauth_clients WHERE client_id = $1", client_id
        )
        if row is None:
            return None
        return json.loads(row["metadata"]), row["secret_hash"]

    # authorization requests ----------------------------------------------------------------
    async def create_request(
        self, *, request_id: str, client_id: str, redirect_uri: str, explicit: bool, scopes: list[str],
        code_challenge: str, state: str | None, resource: str, expires_at: datetime,
    ) -> None:
        await self.pool.execute(
            f"""INSERT INTO {self.s}.oauth_requests
                (id, client_id, redirect_uri, redirect_uri_explicit, scopes, code_challenge, state, resource, expires_at)
                VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)""",
            request_id, client_id, redirect_uri, explicit, scopes, code_challenge, state, resource, expires_at,
        )

    async def get_request(self, request_id: str) -> asyncpg.Record | None:
        return await self.pool.fetchrow(
            f"""SELECT r.*, c.metadata FROM {self.s}.oauth_requests r
                JOIN {self.s}.oauth_clients c USING (client_id)
                WHERE r.id = $1 AND r.completed_at IS NULL AND r.expires_at > now()""",
            request_id,
        )

    async def complete_request(self, request_id: str) -> asyncpg.Record | None:
        """Mark the request answered, once; None when it was answered already or has expired."""
        return await self.pool.fetchrow(
            f"""UPDATE {self.s}.oauth_requests SET completed_at = now()
                WHERE id = $1 AND completed_at IS NULL AND expires_at > now() RETURNING *""",
            request_id,
        )

    # codes ---------------------------------------------------------------------------------
    async def create_code(self, *, code_hash: str, request: asyncpg.Record, user_id: str, expires_at: datetime) -> None:
        await self.pool.execute(
            f"""INSERT INTO {self.s}.oauth_codes (code_hash, client_id, user_id, redirect_uri, redirect_uri_explicit,
                scopes, code_challenge, resource, expires_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)""",
            code_hash, request["client_id"], user_id, request["redirect_uri"], request["redirect_uri_explicit"],
            list(request["scopes"]), request["code_challenge"], request["resource"], expires_at,
        )

    async def find_code(self, code_hash: str) -> asyncpg.Record | None:
        return await self.pool.fetchrow(f"SELECT * FROM {self.s}.oauth_codes WHERE code_hash = $1", code_hash)

    async def redeem_code(
        self, *, code_hash: str, grant_id: UUID, access_hash: str, access_expires: datetime,
        refresh_hash: str, refresh_expires: datetime,
    ) -> bool:
        """Use the code once and open a grant with its first token pair; False if already used."""
        async with self.pool.acquire() as conn, conn.transaction():
            code = await conn.fetchrow(
                f"""SELECT c.*, u.disabled FROM {self.s}.oauth_codes c JOIN {self.s}.users u ON u.id = c.user_id
                    WHERE c.code_hash = $1 AND c.used_at IS NULL FOR UPDATE OF c""",
                code_hash,
            )
            if code is None or code["disabled"]:
                return False
            await conn.execute(
                f"""INSERT INTO {self.s}.oauth_grants (id, client_id, user_id, scopes, resource)
                    VALUES ($1,$2,$3,$4,$5)""",
                grant_id, code["client_id"], code["user_id"], list(code["scopes"]), code["resource"],
            )
            await conn.execute(
                f"UPDATE {self.s}.oauth_codes SET used_at = now(), grant_id = $2 WHERE code_hash = $1",
                code_hash, grant_id,
            )
            await self._insert_pair(conn, grant_id, list(code["scopes"]), list(code["scopes"]),
                                    access_hash, access_expires, refresh_hash, refresh_expires)
            return True

    async def _insert_pair(
        self, conn: asyncpg.Connection, grant_id: UUID, access_scopes: list[str], refresh_scopes: list[str],
        access_hash: str, access_expires: datetime, refresh_hash: str, refresh_expires: datetime,
    ) -> None:
        await conn.execute(
            f"INSERT INTO {self.s}.oauth_access_tokens (token_hash, grant_id, scopes, expires_at) VALUES ($1,$2,$3,$4)",
            access_hash, grant_id, access_scopes, access_expires,
        )
        await conn.execute(
            f"INSERT INTO {self.s}.oauth_refresh_tokens (token_hash, grant_id, scopes, expires_at) VALUES ($1,$2,$3,$4)",
            refresh_hash, grant_id, refresh_scopes, refresh_expires,
        )

    # tokens --------------------------------------------------------------------------------
    async def find_access_token(self, token_hash: str) -> TokenRow | None:
        row = await self.pool.fetchrow(
            f"""SELECT t.grant_id, g.client_id, g.user_id, t.scopes, g.resource, t.expires_at,
                       g.revoked_at IS NOT NULL AS revoked, u.disabled, u.name AS user_name
                FROM {self.s}.oauth_access_tokens t
                JOIN {self.s}.oauth_grants g ON g.id = t.grant_id JOIN {self.s}.users u ON u.id = g.user_id
                WHERE t.token_hash = $1""",
            token_hash,
        )
        return _token(row) if row is not None else None

    async def find_refresh_token(self, token_hash: str) -> TokenRow | None:
        row = await self.pool.fetchrow(
            f"""SELECT t.grant_id, g.client_id, g.user_id, t.scopes, g.resource, t.expires_at, t.rotated_at,
                       g.revoked_at IS NOT NULL AS revoked, u.disabled
                FROM {self.s}.oauth_refresh_tokens t
                JOIN {self.s}.oauth_grants g ON g.id = t.grant_id JOIN {self.s}.users u ON u.id = g.user_id
                WHERE t.token_hash = $1""",
            token_hash,
        )
        return _token(row) if row is not None else None

    async def rotate_refresh_token(
        self, *, old_hash: str, grant_id: UUID, access_scopes: list[str], refresh_scopes: list[str],
        access_hash: str, access_expires: datetime, refresh_hash: str, refresh_expires: datetime,
    ) -> bool:
        """Spend the refresh token and issue the next pair; False if it was spent (or revoked) meanwhile."""
        async with self.pool.acquire() as conn, conn.transaction():
            spent = await conn.fetchval(
                f"""UPDATE {self.s}.oauth_refresh_tokens t SET rotated_at = now()
                    FROM {self.s}.oauth_grants g
                    WHERE t.token_hash = $1 AND t.rotated_at IS NULL AND g.id = t.grant_id AND g.revoked_at IS NULL
                    RETURNING t.grant_id""",
                old_hash,
            )
            if spent is None:
                return False
            await self._insert_pair(conn, grant_id, access_scopes, refresh_scopes,
                                    access_hash, access_expires, refresh_hash, refresh_expires)
            return True

    async def revoke_grant(self, grant_id: UUID, reason: str) -> str | None:
        """Revoke a grant (every token of the family); returns its user id when revoked now."""
        return await self.pool.fetchval(
            f"""UPDATE {self.s}.oauth_grants SET revoked_at = now(), revoked_reason = $2
                WHERE id = $1 AND revoked_at IS NULL RETURNING user_id""",
            grant_id, reason,
        )

    async def grant_of_code(self, code_hash: str) -> UUID | None:
        return await self.pool.fetchval(f"SELECT grant_id FROM {self.s}.oauth_codes WHERE code_hash = $1", code_hash)

    # sessions ------------------------------------------------------------------------------
    async def create_session(self, id_hash: str, user_id: str, expires_at: datetime) -> None:
        await self.pool.execute(
            f"INSERT INTO {self.s}.sessions (id_hash, user_id, expires_at) VALUES ($1,$2,$3)",
            id_hash, user_id, expires_at,
        )

    async def session_user(self, id_hash: str) -> str | None:
        return await self.pool.fetchval(
            f"""SELECT s.user_id FROM {self.s}.sessions s JOIN {self.s}.users u ON u.id = s.user_id
                WHERE s.id_hash = $1 AND s.expires_at > now() AND NOT u.disabled""",
            id_hash,
        )

    async def end_session(self, id_hash: str) -> bool:
        """Sign out: the session is deleted, so its cookie opens nothing any more."""
        return await self.pool.fetchval(
            f"DELETE FROM {self.s}.sessions WHERE id_hash = $1 RETURNING true", id_hash
        ) is not None

    async def has_live_grant(self, client_id: str, user_id: str) -> bool:
        """Whether the user has allowed this client before (an unrevoked grant)."""
        return bool(await self.pool.fetchval(
            f"SELECT true FROM {self.s}.oauth_grants WHERE client_id = $1 AND user_id = $2 AND revoked_at IS NULL LIMIT 1",
            client_id, user_id,
        ))

    # housekeeping --------------------------------------------------------------------------
    async def purge_expired(
        self, *, unused_client_age: timedelta = timedelta(days=7), code_grace: timedelta = timedelta(days=1),
        failure_window: timedelta = timedelta(minutes=15),
    ) -> dict[str, int]:
        """Delete what can no longer be used; returns how many rows of each kind went.

        - authorization requests and sessions past their expiry;
        - codes ``code_grace`` after their expiry (kept that long so a replay is still recognised
          and revokes its grant);
        - access and refresh tokens past their expiry (a rotated refresh token is kept until then
          for reuse detection), then grants with no token left that are revoked or older than a
          code's grace (nothing can be issued from them any more);
        - sign-in failure counters whose window has passed and that are not locked;
        - clients registered more than ``unused_client_age`` ago that never obtained a grant and
          have no pending request or code.
        """
        counts: dict[str, int] = {}
        async with self.pool.acquire() as conn, conn.transaction():
            async def run(name: str, sql: str, *args: Any) -> None:
                status = await conn.execute(sql, *args)  # "DELETE <n>"
                counts[name] = int(status.rsplit(" ", 1)[-1])

            await run("requests", f"DELETE FROM {self.s}.oauth_requests WHERE expires_at < now()")
            await run("sessions", f"DELETE FROM {self.s}.sessions WHERE expires_at < now()")
            await run("codes", f"DELETE FROM {self.s}.oauth_codes WHERE expires_at < now() - $1::interval",
                      code_grace)
            await run("access_tokens",
                      f"DELETE FROM {self.s}.oauth_access_tokens WHERE expires_at < now()")
            await run("refresh_tokens",
                      f"DELETE FROM {self.s}.oauth_refresh_tokens WHERE expires_at < now()")
            await run("grants", f"""
                DELETE FROM {self.s}.oauth_grants g
                WHERE (g.revoked_at IS NOT NULL OR g.created_at < now() - $1::interval)
                  AND NOT EXISTS (SELECT 1 FROM {self.s}.oauth_access_tokens t WHERE t.grant_id = g.id)
                  AND NOT EXISTS (SELECT 1 FROM {self.s}.oauth_refresh_tokens t WHERE t.grant_id = g.id)
                  AND NOT EXISTS (SELECT 1 FROM {self.s}.oauth_codes c WHERE c.grant_id = g.id)""", code_grace)
            await run("login_failures", f"""
                DELETE FROM {self.s}.login_failures
                WHERE first_failed_at < now() - $1::interval AND (locked_until IS NULL OR locked_until < now())""", failure_window)
            await run("clients", f"""
                DELETE FROM {self.s}.oauth_clients c
                WHERE c.created_at < now() - $1::interval
                  AND NOT EXISTS (SELECT 1 FROM {self.s}.oauth_grants g WHERE g.client_id = c.client_id)
                  AND NOT EXISTS (SELECT 1 FROM {self.s}.oauth_codes k WHERE k.client_id = c.client_id)
                  AND NOT EXISTS (SELECT 1 FROM {self.s}.oauth_requests r
                                  WHERE r.client_id = c.client_id AND r.expires_at > now())""", unused_client_age)
        return counts

    # sign-in throttling --------------------------------------------------------------------
    async def locked_until(self, keys: tuple[str, ...]) -> datetime | None:
        return await self.pool.fetchval(
            f"SELECT max(locked_until) FROM {self.s}.login_failures WHERE key = ANY($1) AND locked_until > now()",
            list(keys),
        )

    async def record_failure(self, key: str, window: timedelta) -> int:
        """Count a failed sign-in; the count restarts after ``window`` without failures."""
        return await self.pool.fetchval(
            f"""INSERT INTO {self.s}.login_failures AS f (key, failures, first_failed_at) VALUES ($1, 1, now())
                ON CONFLICT (key) DO UPDATE SET
                  failures = CASE WHEN f.first_failed_at < now() - $2::interval THEN 1 ELSE f.failures + 1 END,
                  first_failed_at = CASE WHEN f.first_failed_at < now() - $2::interval THEN now() ELSE f.first_failed_at END
                RETURNING failures""",
            key, window,
        )

    async def lock(self, key: str, until: datetime) -> None:
        await self.pool.execute(f"UPDATE {self.s}.login_failures SET locked_until = $2 WHERE key = $1", key, until)

    async def clear_failures(self, key: str) -> None:
        await self.pool.execute(f"DELETE FROM {self.s}.login_failures WHERE key = $1", key)


def _user(row: asyncpg.Record) -> UserView:
    return UserView(user_id=row["id"], username=row["username"], name=row["name"],
                    disabled=bool(row["disabled"]), created_at=row["created_at"])


def _token(row: asyncpg.Record) -> TokenRow:
    return TokenRow(
        grant_id=row["grant_id"], client_id=row["client_id"], user_id=row["user_id"], scopes=list(row["scopes"]),
        resource=row["resource"], expires_at=row["expires_at"], revoked=bool(row["revoked"]),
        user_disabled=bool(row["disabled"]), rotated_at=row.get("rotated_at") if "rotated_at" in row else None,
        user_name=row.get("user_name") if "user_name" in row else None,
    )
