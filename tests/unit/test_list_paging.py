"""GET /v1/memories' pieces that need no stack: a page cursor carries its sort and the last row's
sort keys (and nothing else it did not give is taken), created_to is through a date's end."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from contracts.memory import MemoryStatus, MemoryView, RecallMemory
from services.memory.application.memories import page_after, page_cursor
from services.memory.domain.errors import Conflict

pytestmark = pytest.mark.unit


def view(importance: int = 3) -> MemoryView:
    at = datetime(2026, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)
    return MemoryView(id=uuid.uuid4(), project="p", content="x", importance=importance, confidence=0.9, source="api",
                      version=1, status=MemoryStatus.ACTIVE, created_at=at, updated_at=at)


@pytest.mark.parametrize("sort", ["importance", "newest", "oldest"])
def test_a_cursor_gives_back_the_sort_keys_of_its_row(sort: str) -> None:
    last = view(4)
    keys = page_after(sort, page_cursor(sort, last))
    assert keys == ([4, last.updated_at, last.id] if sort == "importance" else [last.created_at, last.id])


@pytest.mark.parametrize("cursor", ["x", "bm90LWEtY3Vyc29y", page_cursor("newest", view())[:-3], "WyJuZXdlc3QiXQ"])
def test_a_cursor_it_did_not_give_is_a_conflict_naming_cursor(cursor: str) -> None:
    with pytest.raises(Conflict) as refused:
        page_after("newest", cursor)
    assert refused.value.field == "cursor"


def test_a_cursor_of_another_sort_is_refused_naming_both() -> None:
    with pytest.raises(Conflict) as refused:
        page_after("oldest", page_cursor("newest", view()))
    assert "sort=newest" in refused.value.message and "sort=oldest" in refused.value.message


def test_created_to_is_through_a_dates_end_or_through_an_instant() -> None:
    assert RecallMemory(created_to="2026-05-01").created_to == datetime(2026, 5, 2, tzinfo=UTC)
    assert RecallMemory(created_to="2026-05-01T10:00:00Z").created_to == datetime(2026, 5, 1, 10, 0, 0, 1, tzinfo=UTC)
    assert RecallMemory(created_to="9999-12-31").created_to == datetime.max.replace(tzinfo=UTC)
    assert RecallMemory(created_from="2026-05-01").created_from == datetime(2026, 5, 1, tzinfo=UTC)
