"""What the memory application's handler families share: the subject of an aggregate, and the
bounds of their in-process hints."""

from __future__ import annotations

from uuid import UUID

from contracts.subjects import Names
from services.memory.domain import model

#: Past this many entries an in-process hint or cache is cleared (it only saves work).
HINTS_MAX = 16_384


def memory_subject(names: Names, tenant: str, memory_id: UUID) -> str:
    """The event subject of one memory."""
    return names.event(tenant, model.AGGREGATE, str(memory_id))
