"""The auth service's Postgres store (schema ``auth``): users and API keys (its command log is kit's)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from uuid import UUID

import asyncpg

from contracts.auth import ApiKeyView
from kit.pg import migrate

MIGRATIONS = Path(__file__).parent / "migrations"
_KEY_COLUMNS = "k.id, k.user_id, k.name, k.prefix, k.scopes, k.project, k.created_at, k.expires_at, k.last_used_at, k.revoked_at"


def view(row: asyncpg.Record) -> ApiKeyView:
    return ApiKeyView(
        key_id=row["id"], user_id=row["user_id"], name=row["name"], prefix=row["prefix"],
        scopes=list(row["scopes"]), project=row["project"], created_at=row["created_at"],
        expires_at=row["expires_at"], last_used_at=row["last_used_at"], revoked_at=row["revoked_at"],
    )


class AuthStore:
    def __init__(self, pool: asyncpg.Pool, schema: str = "auth") -> None:
        self.pool = pool
        self.s = schema

    async def migrate(self, owner: str) -> list[str]:
        """Claim the schema for the install ``owner`` (its namespace) and apply missing migrations."""
        return await migrate(self.pool, self.s, MIGRATIONS, owner=owner)

    async def user_exists(self, user_id: str) -> bool:
        return bool(await self.pool.fetchval(f"SELECT 1 FROM {self.s}.users WHERE id = $1", user_id))

    async def create_key(
        self, *, user_id: str, user_name: str | None, create_user: bool, key_id: UUID,
        name: str, prefix: str, key_hash: str, scopes: list[str], project: str | None,
        expires_at: datetime | None,
    ) -> tuple[ApiKeyView, bool]:
        """Insert the user (when new) and the key in one transaction; idempotent by ``key_id``.

        Returns the key and whether it was inserted now (False: a retry of the same command).
        """
        async with self.pool.acquire() as conn, conn.transaction():
            if create_user:
                await conn.execute(
                    f"INSERT INTO {self.s}.users (id, name) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
                    user_id, user_name or user_id,
                )
            row = await conn.fetchrow(
                f"""INSERT INTO {self.s}.api_keys AS k (id, user_id, name, prefix, key_hash, scopes, project, expires_at)
                    VALUES ($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT (id) DO NOTHING RETURNING {_KEY_COLUMNS}""",
                key_id, user_id, name, prefix, key_hash, scopes, project, expires_at,
            )
            if row is not None:
                return view(row), True
            existing = await conn.fetchrow(f"SELECT {_KEY_COLUMNS} FROM {self.s}.api_keys k WHERE k.id = $1", key_id)
            return view(existing), False

    async def revoke_key(self, key_id: UUID) -> ApiKeyView | None:
        row = await self.pool.fetchrow(
            f"""UPDATE {self.s}.api_keys AS k SET revoked_at = coalesce(revoked_at, now())
                WHERE id = $1 RETURNING {_KEY_COLUMNS}""",
            key_id,
        )
        return view(row) if row is not None else None

    async def list_keys(self, user_id: str | None) -> list[ApiKeyView]:
        rows = await self.pool.fetch(
            f"""SELECT {_KEY_COLUMNS} FROM {self.s}.api_keys k
                WHERE $1::text IS NULL OR k.user_id = $1 ORDER BY k.created_at""",
            user_id,
        )
        return [view(r) for r in rows]

    async def find_by_hash(self, key_hash: str) -> tuple[ApiKeyView, bool, str] | None:
        """The key with this hash, whether its user is disabled, and the user's display name."""
        row = await self.pool.fetchrow(
            f"""SELECT {_KEY_COLUMNS}, k.key_hash, u.disabled, u.name AS user_name FROM {self.s}.api_keys k
                JOIN {self.s}.users u ON u.id = k.user_id WHERE k.key_hash = $1""",
            key_hash,
        )
        if row is None:
            return None
        return view(row), bool(row["disabled"]), row["user_name"]

    async def touch(self, key_id: UUID) -> None:
        await self.pool.execute(
            f"""UPDATE {self.s}.api_keys SET last_used_at = now()
                WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - interval '60 seconds')""",
            key_id,
        )
