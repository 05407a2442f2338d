"""The embedding cache: a replay in a fresh process embeds nothing that was embedded before, and
rebuilds the same read model; without the cache it recomputes the same thing."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from contracts.envelope import CommandEnvelope
from contracts.memory import Recall
from services.memory.adapters.embedding_cache import PgEmbeddingCache
from services.memory.config import MemorySettings
from services.memory.main import memory_app
from services.memory.replay import rebuild

pytestmark = pytest.mark.integration


class Counting:
    """Counts what reaches the real model behind the service's priming wrapper."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_id, self.dim = inner.model_id, inner.dim
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> Any:
        self.texts += len(texts)
        return self.inner.embed(texts)

    def encode_documents(self, documents: Sequence[tuple[str | None, str]]) -> Any:
        self.texts += len(documents)
        return self.inner.encode_documents(documents)

    def encode_query(self, text: str) -> Any:
        return self.inner.encode_query(text)


def cmd(payload: dict[str, Any]) -> CommandEnvelope:
    return CommandEnvelope(command_id=uuid.uuid4().hex, type="save_memory", tenant="carol", payload=payload)


async def digest(app: Any) -> tuple[list[Any], list[list[str]]]:
    rows = await app.store.pool.fetch(
        f"SELECT id, version, status, content_hash, late_tokens FROM {app.store.s}.memories ORDER BY id")
    recalls = []
    for q in ("tea", "marathon in Berlin", "猫", "sister in Osaka"):
        result = await app.service.recall("carol", Recall(query=q, limit=5))
        recalls.append([str(h.memory.id) for h in result.hits])
    return [tuple(r) for r in rows], recalls


def count_models(app: Any) -> tuple[Counting, Counting]:
    encoders = app.service.encoders
    encoders.embedder.inner = embedder = Counting(encoders.embedder.inner)
    encoders.late_encoder.inner = late = Counting(encoders.late_encoder.inner)
    return embedder, late


async def test_replay_in_a_new_process_embeds_nothing_and_rebuilds_the_same(infra, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings = MemorySettings(home=tmp_path, nats_url=infra.nats_url, database_url=infra.database_url,
                              namespace=infra.fresh_namespace(), memory_schema="ec_" + uuid.uuid4().hex[:8])
    contents = [
        {"content": "I like jasmine tea. I drink it every morning."},
        {"content": "我家的猫叫小白", "project": "home"},
        {"content": "My sister lives in Osaka", "context": "Planning the trip to Japan"},
        {"content": "Marathon training for Berlin! Long run on Sunday.", "memory_key": "goal.run", "category": "goal"},
    ]
    try:
        async with memory_app(settings) as app:
            for payload in contents:
                assert (await app.service.handle_command(cmd(payload))).ok
            # saving stored every sentence vector and every memory's token rows
            assert await PgEmbeddingCache(app.store.pool, app.store.s).count() >= 2 * len(contents)
            before = await digest(app)
        async with memory_app(settings) as app:  # a new process: nothing primed in memory
            embedder, late = count_models(app)
            report = await rebuild(app, rebuild_index=True)  # every point written: vectors from the cache
            assert report.events == len(contents)
            assert (embedder.texts, late.texts) == (0, 0)
            assert app.service.encoders.cache.hits >= 2 * len(contents)
            assert await digest(app) == before
            # a cache: emptied, the replay computes everything again, and gets the same
            await PgEmbeddingCache(app.store.pool, app.store.s).clear()
        async with memory_app(settings) as app:
            embedder, late = count_models(app)
            await rebuild(app, rebuild_index=True)
            assert embedder.texts >= len(contents) and late.texts == len(contents)
            assert await digest(app) == before
            # and it is filled again for the next replay
            assert await PgEmbeddingCache(app.store.pool, app.store.s).count() >= 2 * len(contents)
    finally:
        async with memory_app(settings) as app:
            await app.bus.delete_streams()
