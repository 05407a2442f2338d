"""The purge of a user, the graph service's part: its rows of the user (nodes, edges, the
similar-edge queue, the projection's marks). Their events are purged from the event stream by the
caller, so a replay of the graph brings nothing back."""

from __future__ import annotations

from typing import Protocol

from contracts.portability import PurgeGraphUser, PurgeResult
from contracts.subjects import GRAPH
from kit.service import CommandCall


class PurgeStore(Protocol):
    async def purge(self, tenant: str) -> dict[str, int]: ...


class GraphPurge:
    def __init__(self, store: PurgeStore) -> None:
        self.store = store

    async def purge(self, call: CommandCall, cmd: PurgeGraphUser) -> PurgeResult:
        """Delete every row of the user in the graph's schema. Idempotent."""
        return PurgeResult(service=GRAPH, removed=await self.store.purge(cmd.user_id))
