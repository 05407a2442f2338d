"""Auth's rows of one user, removed for good (the purge of a user)."""

from __future__ import annotations

import asyncpg


class PgAuthPurge:
    def __init__(self, pool: asyncpg.Pool, schema: str = "auth") -> None:
        self.pool = pool
        self.s = schema

    async def purge(self, user_id: str) -> dict[str, int]:
        """Delete the user, their keys, OAuth grants (with their tokens), codes, sessions and
        sign-in failures, and every stored command outcome that names them; rows removed per table."""
        s = self.s
        removed: dict[str, int] = {}
        async with self.pool.acquire() as conn, conn.transaction():
            username = await conn.fetchval(f"SELECT username FROM {s}.users WHERE id = $1", user_id)

            async def run(table: str, sql: str, *args: object) -> None:
                status = await conn.execute(sql, *args)
                removed[table] = removed.get(table, 0) + int(status.split()[-1])

            await run("oauth_codes", f"DELETE FROM {s}.oauth_codes WHERE user_id = $1", user_id)
            await run("oauth_grants", f"DELETE FROM {s}.oauth_grants WHERE user_id = $1", user_id)  # tokens cascade
            await run("sessions", f"DELETE FROM {s}.sessions WHERE user_id = $1", user_id)
            await run("api_keys", f"DELETE FROM {s}.api_keys WHERE user_id = $1", user_id)
            if username:
                await run("login_failures", f"DELETE FROM {s}.login_failures WHERE position(lower($1) in lower(key)) > 0",
                          username)
            # outcomes of key commands (sent by the operator) carry the user id in their views
            await run("command_outcomes", f"DELETE FROM {s}.command_outcomes WHERE tenant = $1 OR "
                      "position($1 in outcome::text) > 0", user_id)
            await run("command_log", f"DELETE FROM {s}.command_log WHERE position($1 in outcome::text) > 0", user_id)
            await run("users", f"DELETE FROM {s}.users WHERE id = $1", user_id)
        return removed

    async def ensure_user(self, user_id: str) -> bool:
        """Create the user (no login, no key) unless they exist; whether they were created."""
        status = await self.pool.execute(
            f"INSERT INTO {self.s}.users (id, name) VALUES ($1, $1) ON CONFLICT (id) DO NOTHING", user_id)
        return status.split()[-1] == "1"
