"""The expiry round (services/memory/application/expiry.py) without I/O: what it sends, under which
keys, and that one user's failure does not stop the others."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from contracts.memory import ReinstateExpired, ReinstateExpiredResult
from services.memory.application.expiry import expiry_key, expiry_round

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


class Store:
    def __init__(self, rows: list[tuple[str, uuid.UUID, int]]) -> None:
        self.rows = rows
        self.asked: list[tuple[datetime, int]] = []

    async def expired_superseders(self, now: datetime, limit: int) -> list[tuple[str, uuid.UUID, int]]:
        self.asked.append((now, limit))
        return self.rows[:limit]


async def test_each_expired_memory_is_sent_once_under_a_key_of_its_version_and_a_failure_is_skipped() -> None:
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    store = Store([("ann", a, 3), ("bob", b, 2), ("cy", c, 7)])
    sent: list[tuple[str, ReinstateExpired, str]] = []

    async def send(tenant: str, command: ReinstateExpired, *, key: str) -> ReinstateExpiredResult:
        sent.append((tenant, command, key))
        if tenant == "bob":
            raise RuntimeError("bus down for a moment")
        return ReinstateExpiredResult(expired=True, reinstated=[uuid.uuid4()] * (2 if tenant == "cy" else 1),
                                      message="")

    assert await expiry_round(store, send, NOW, limit=10) == 3  # ann's one and cy's two; bob's in the next round
    assert [(t, cmd.memory_id, key) for t, cmd, key in sent] == [
        ("ann", a, expiry_key(a, 3)), ("bob", b, expiry_key(b, 2)), ("cy", c, expiry_key(c, 7))]
    assert store.asked == [(NOW, 10)]
    assert expiry_key(a, 3) != expiry_key(a, 4)  # a later version of the memory is another command
    assert await expiry_round(Store([]), send, NOW) == 0
