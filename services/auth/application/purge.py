"""The purge of a user, auth's part: every gateway forgets the user's credentials at once (the
``UserDeactivated`` event every gateway listens to), then their rows are deleted."""

from __future__ import annotations

from typing import Protocol
from uuid import NAMESPACE_URL, uuid5

from contracts.portability import PurgeAuthUser, PurgeResult, RestoreAuthUser, RestoredUser
from contracts.subjects import AUTH
from kit.service import CommandCall
from services.auth.application.events import AuthEvents


class PurgeStore(Protocol):
    async def purge(self, user_id: str) -> dict[str, int]: ...
    async def ensure_user(self, user_id: str) -> bool: ...


class AuthPurge:
    def __init__(self, store: PurgeStore, events: AuthEvents) -> None:
        self.store = store
        self.events = events

    async def purge(self, call: CommandCall, cmd: PurgeAuthUser) -> PurgeResult:
        """Remove the user, their API keys, OAuth grants and tokens, codes and sessions.
        Idempotent: a second purge removes nothing (and `engram keys create --user` then makes the
        user anew). The event announcing it is purged from the event stream with the user's others."""
        await self.events.user_deactivated(
            cmd.user_id, call.command_id, event_id=uuid5(NAMESPACE_URL, f"engram:event:{call.command_id}:{cmd.user_id}"))
        return PurgeResult(service=AUTH, removed=await self.store.purge(cmd.user_id))

    async def restore_user(self, call: CommandCall, cmd: RestoreAuthUser) -> RestoredUser:
        """Make sure the user exists (an import after a purge brings them back); idempotent."""
        return RestoredUser(user_id=cmd.user_id, created=await self.store.ensure_user(cmd.user_id))
