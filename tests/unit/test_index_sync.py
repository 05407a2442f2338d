"""Fingerprints of points and a replay's decisions about which points to write (no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

import pytest

from contracts.memory import MemoryState
from services.memory.search import index_sync
from services.memory.search.index_sync import ReplaySync, fingerprint, point_recipe

pytestmark = pytest.mark.unit

WHEN = datetime(2025, 1, 2, 3, 4, tzinfo=UTC)


def state(content: str = "I like jasmine tea", **kw: object) -> MemoryState:
    return MemoryState(id=UUID(int=7), tenant="t", project="p", importance=3, source="s", version=1,
                       created_at=WHEN, updated_at=WHEN, content=content, **kw)


def test_a_fingerprint_changes_with_the_state_the_embedder_and_the_recipe() -> None:
    recipe = point_recipe("model-a")
    assert fingerprint(recipe, state()) == fingerprint(recipe, state())
    assert fingerprint(recipe, state()) != fingerprint(recipe, state("I like green tea"))
    assert fingerprint(recipe, state()) != fingerprint(recipe, state(context="at breakfast"))
    assert fingerprint(recipe, state()) != fingerprint(recipe, state().model_copy(update={"version": 2}))
    assert fingerprint(point_recipe("model-b"), state()) != fingerprint(recipe, state())


def test_the_recipe_names_the_points_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    before = point_recipe("model-a")
    point_recipe.cache_clear()
    monkeypatch.setattr(index_sync, "POINT_VERSION", index_sync.POINT_VERSION + 1)
    try:
        assert point_recipe("model-a") != before
    finally:
        point_recipe.cache_clear()


def test_a_kept_index_writes_only_what_differs_or_is_missing() -> None:
    sync = ReplaySync(keep=True)
    todo = sync.to_write(["a", "b", "c", "d"], ["1", "2", "3", "4"], {"a": "1", "b": "old", "c": None})
    assert todo == [1, 2, 3] and (sync.kept, sync.written) == (1, 3)


def test_an_emptied_index_writes_everything() -> None:
    sync = ReplaySync(keep=False)
    assert sync.to_write(["a", "b"], ["1", "2"], {"a": "1", "b": "2"}) == [0, 1]


def test_the_batch_being_written_counts_before_what_the_index_says() -> None:
    sync = ReplaySync(keep=True)
    # batch N writes version 1 of "a" over the kept version 2 and deletes "b"
    sync.scheduled({"a": "v1"}, ["b"], {"a": "v1"})
    # batch N+1 reads the index before N landed: it still says v2 for "a", and holds "b"
    assert sync.to_write(["a", "b"], ["v2", "b1"], {"a": "v2", "b": "b1"}) == [0, 1]


def test_the_sweep_removes_points_of_no_live_memory() -> None:
    sync = ReplaySync(keep=True)
    sync.scheduled({"a": "1", "b": "2"}, [], {})
    sync.scheduled({"c": "3"}, ["b"], {"c": "3"})
    assert sync.stale(["a", "b", "c", "x"]) == ["b", "x"] and sync.swept == 2
