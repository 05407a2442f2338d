"""The projection's rules on a batch's slice of the read model, without I/O: what a batch writes
back (nodes with their order numbers, edges, counts, the similar queue) for a key family whose
first memory is later forgotten, and a batch that reads what an earlier one wrote."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest

from contracts.memory import Category, MemoryState, MemoryStatus
from services.graph.application.projection import GraphProjection
from services.graph.domain.model import memory_row
from services.graph.domain.slice import GraphSlice

pytestmark = pytest.mark.unit
AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def pet(key: str, **kw: object) -> MemoryState:
    return MemoryState.model_validate(dict(id=uuid4(), tenant="alice", project="home", content=f"about {key}",
                                           category=Category.PREFERENCE, memory_key=key, created_at=AT,
                                           updated_at=AT) | kw)


async def write(view: GraphSlice, state: MemoryState, seq: int) -> bool:
    return await GraphProjection.write_memory(view, state, memory_row(state), seq)


async def test_a_family_then_a_forget_in_one_batch() -> None:
    view = GraphSlice([], [], {}, next_order=1)
    dog, cat = pet("preference.pet_dog"), pet("preference.pet_cat")
    assert await write(view, dog, 1) and await write(view, cat, 2)
    gone = dog.model_copy(update={"status": MemoryStatus.FORGOTTEN, "version": 2, "updated_at": AT + timedelta(1)})
    assert not await write(view, gone, 3)
    ch = view.changes()
    assert sorted((o, r.id) for o, r in ch.node_upserts) == [(1, "project:home"), (2, str(dog.id)), (3, str(cat.id))]
    assert ch.last_order == 3 and ch.node_deletes == []
    d, c = str(dog.id), str(cat.id)
    assert {k for k, _ in ch.edge_upserts} == {
        ("alice", d, "in_project", "project:home"), ("alice", c, "in_project", "project:home"),
        ("alice", c, "extends", d), ("alice", c, "updates", d)}
    assert ch.count_deltas == {("alice", "home", "project"): 1, ("alice", "home", "memory"): 2}
    assert ch.unqueue == [("alice", d)] and [t.memory_id for t in ch.queue] == [c]
    assert ch.similar_drops == [("alice", d)] and ch.applied == {("alice", d): 3, ("alice", c): 2}


async def test_a_batch_reads_what_an_earlier_batch_wrote() -> None:
    """A forgotten memory loaded from the read model gets the family's next memory as successor."""
    old = pet("preference.pet_dog", status=MemoryStatus.FORGOTTEN, version=2)
    earlier = GraphSlice([], [], {}, next_order=1)
    await write(earlier, old, 1)
    first = earlier.changes()
    view = GraphSlice(first.node_upserts, first.edge_upserts, first.applied, next_order=(first.last_order or 0) + 1)
    new = pet("preference.pet_cat")
    await write(view, new, 7)
    ch = view.changes()
    assert [(o, r.id) for o, r in ch.node_upserts if r.id == str(new.id)] == [(3, str(new.id))]
    assert {k for k, _ in ch.edge_upserts} >= {("alice", str(new.id), "updates", str(old.id)),
                                               ("alice", str(new.id), "extends", str(old.id))}
    assert ch.edge_deletes == [] and ch.count_deltas == {("alice", "home", "memory"): 1}
    assert await view.lock("alice", str(new.id)) == 7 and await view.lock("alice", "nothing") is None
