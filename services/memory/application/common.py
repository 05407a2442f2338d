"""What the memory application's handler families share: the activity clock, the subject of an
aggregate, and the bounds of its in-process hints."""

from __future__ import annotations

import asyncio
from uuid import UUID

from contracts.subjects import Names
from services.memory.domain import model

#: Optimistic-concurrency retries of one command before it gives up ("retry").
MAX_RACES = 8
#: Past this many entries an in-process hint or cache is cleared (it only saves work).
HINTS_MAX = 16_384


class Activity:
    """When this process last handled a command (reads do not count): the vector index is
    optimised only once writes pause."""

    def __init__(self) -> None:
        self.last = 0.0  # event-loop time

    def touch(self) -> None:
        self.last = asyncio.get_running_loop().time()


def memory_subject(names: Names, tenant: str, memory_id: UUID) -> str:
    """The event subject of one memory."""
    return names.event(tenant, model.AGGREGATE, str(memory_id))
