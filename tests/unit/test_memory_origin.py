"""Where a memory came from (services/memory/domain/origin.py): one of saved, extracted, imported."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest

from contracts.memory import IMPORTED_SOURCES, MemoryState, Provenance
from services.memory.domain.origin import origin_of
from services.memory.search.indexing import point_for, view_of

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("restored", "source", "extracted", "expected"), [
    (False, "mcp", False, "saved"),
    (False, "api", False, "saved"),
    (False, "extractor", True, "extracted"),
    (True, "mcp", False, "imported"),  # restored from an Engram export, whatever it was there
    (True, "extractor", True, "imported"),
    (False, "mem0", False, "imported"),  # saved by `engram import` from another system's export
    (False, "supermemory", False, "imported"),
    (False, "chat", True, "imported"),
])
def test_every_memory_has_one_origin(restored: bool, source: str, extracted: bool, expected: str) -> None:
    assert origin_of(restored=restored, source=source, extracted=extracted) == expected


def test_the_import_formats_save_with_the_sources_read_as_imported() -> None:
    from deploy import import_formats

    assert {import_formats._MEM0, import_formats._SUPERMEMORY, import_formats._CHAT} == set(IMPORTED_SOURCES)


def test_a_point_carries_its_origin_into_recall_hits() -> None:
    now = datetime.now(UTC)
    state = MemoryState(id=uuid4(), tenant="t", project="default", content="Keeps bees", created_at=now,
                        updated_at=now, source="mcp")
    assert view_of(str(state.id), point_for(state, [0.0] * 4).payload).origin == "saved"  # type: ignore[union-attr]
    assert view_of(str(state.id), point_for(state, [0.0] * 4, restored=True).payload).origin == "imported"  # type: ignore[union-attr]
    learnt = state.model_copy(update={"provenance": Provenance(log_id=uuid4(), task_id="t-1", turns=[0])})
    assert view_of(str(state.id), point_for(learnt, [0.0] * 4).payload).origin == "extracted"  # type: ignore[union-attr]
    older = {k: v for k, v in point_for(state, [0.0] * 4).payload.items() if k != "origin"}
    assert view_of(str(state.id), older).origin is None  # type: ignore[union-attr]  # (a point from before origins)
