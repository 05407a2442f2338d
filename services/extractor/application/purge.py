"""The purge of a user, the extractor's part: its ledger rows of the user and their entry in the
tenant list of the schedules."""

from __future__ import annotations

from typing import Protocol

from contracts.portability import EXTRACTOR, PurgeExtractorUser, PurgeResult
from kit.service import CommandCall


class PurgeStore(Protocol):
    async def purge(self, tenant: str) -> dict[str, int]: ...


class ExtractorPurge:
    def __init__(self, store: PurgeStore) -> None:
        self.store = store

    async def purge(self, call: CommandCall, cmd: PurgeExtractorUser) -> PurgeResult:
        """Delete the user's task-ledger rows and tenant entry. Idempotent."""
        return PurgeResult(service=EXTRACTOR, removed=await self.store.purge(cmd.user_id))
