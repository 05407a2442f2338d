"""A replay after a replay: each memory's dense and keyword vectors come from the embedding cache
(no sentence split, no keyword terms or stemming), its late tokens are copied from the cache
inside Postgres, and where the cache lacks them they are computed; the read model is the same."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from services.memory.config import MemorySettings
from services.memory.main import memory_app
from services.memory.replay import rebuild
from services.memory.search import indexing
from tests.integration.test_embedding_cache import cmd, count_models, digest

pytestmark = pytest.mark.integration


def refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("recomputed what the cache holds")


async def test_a_second_replay_reads_every_vector_from_the_cache(infra, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    settings = MemorySettings(home=tmp_path, nats_url=infra.nats_url, database_url=infra.database_url,
                              namespace=infra.fresh_namespace(), memory_schema="rc_" + uuid.uuid4().hex[:8])
    contents = [
        {"content": "Caroline: I went to the support group. It was powerful! Did you go?"},
        {"content": "My sister lives in Osaka", "context": "Planning the trip to Japan. Flights are booked."},
        {"content": "Marathon training for Berlin! Long run on Sunday.", "memory_key": "goal.run", "category": "goal"},
    ]
    try:
        async with memory_app(settings) as app:
            for payload in contents:
                assert (await app.service.handle_command(cmd(payload))).ok
            saved = await app.service.handle_command(cmd({"content": "a passing thought"}))
            forget = cmd({"memory_id": saved.result["memory_id"]}).model_copy(update={"type": "forget_memory"})
            assert (await app.service.handle_command(forget)).result["forgotten"]
            before = await digest(app)
            await rebuild(app, rebuild_index=True)  # the first replay computes the memories' vectors and keeps them
            assert await digest(app) == before
        async with memory_app(settings) as app:
            embedder, late = count_models(app)
            with monkeypatch.context() as patched:
                patched.setattr(indexing, "split_sentences", refuse)
                patched.setattr(indexing, "document_vector", refuse)
                await rebuild(app, rebuild_index=True)
            assert (embedder.texts, late.texts) == (0, 0)
            assert await digest(app) == before
            # late tokens the cache no longer holds are computed again, the same
            await app.store.pool.execute(f"DELETE FROM {app.store.s}.embedding_cache WHERE model LIKE '%late-packed%'")
            await rebuild(app, rebuild_index=True)
            assert late.texts == len(contents)
            assert await digest(app) == before
    finally:
        async with memory_app(settings) as app:
            await app.bus.delete_streams()
            await app.store.pool.execute(f"DROP SCHEMA IF EXISTS {settings.memory_schema} CASCADE")
