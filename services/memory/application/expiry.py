"""The expiry round: what an expired memory superseded comes back.

A memory's ``forget_after`` takes it out of recall from that moment, as a filter at read time (it
stays in its history and pin_memory can still clear the expiry). A memory it superseded stays
superseded until something says otherwise, so "I'm in Lisbon until Friday" set to expire on
Friday, having superseded "I live in Berlin", would leave nothing current about where the user is
once Friday passed. Each round finds such memories (:meth:`ReadModel.expired_superseders`) and
sends the memory service's ``reinstate_expired`` for each, which brings back what they hid, as
forgetting them would (``MemoryReinstated``: events, so a replay gives the same). Each command's
key derives from the memory and its version, so replicas running a round at once act once, and a
round stopped half-way is finished by the next.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Protocol

from contracts.memory import ReinstateExpired, ReinstateExpiredResult
from services.memory.application.ports import ReadModel

log = logging.getLogger("engram.memory")

#: Expired memories handled per round at most (the rest in the next rounds).
EXPIRY_BATCH = 200

class Send(Protocol):
    """Sends a command as ``tenant`` once per ``key`` (kit's ``Client.send``)."""

    async def __call__(self, tenant: str, command: ReinstateExpired, *, key: str) -> ReinstateExpiredResult: ...


def expiry_key(memory_id: object, version: int) -> str:
    """The idempotency key of the reinstatement for one version of an expired memory."""
    return f"expiry:{memory_id}:v{version}"


async def expiry_round(store: ReadModel, send: Send, now: datetime, *, limit: int = EXPIRY_BATCH) -> int:
    """One round (see the module's text): how many memories came back. A user whose command fails
    is logged and the others still run."""
    back = 0
    for tenant, memory_id, version in await store.expired_superseders(now, limit):
        try:
            result = await send(tenant, ReinstateExpired(memory_id=memory_id), key=expiry_key(memory_id, version))
        except Exception:
            log.exception("the expiry of memory %s (user %s) did not bring back what it superseded; the next "
                          "round tries again", memory_id, tenant)
            continue
        back += len(result.reinstated)
    return back
