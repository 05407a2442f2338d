"""The LLM judge of flagged pairs (issue 30): the memory service configured with
``ENGRAM_TRUTH_LLM_URL`` against a real HTTP server started by the test, answering recorded
OpenAI-compatible chat responses (a paid API's stand-in). A pair the rules cannot settle ("My dog
is called Rex" / "My dog is called Bruno": renamed, or a second dog?) is put to it: a sure answer
settles it (``decided_by: llm``); an unsure, broken or missing answer leaves it flagged."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from uuid import UUID

import pytest

from contracts.memory import MemoryStatus
from services.memory.config import MemorySettings
from services.memory.main import MemoryApp, memory_app
from tests.integration.test_extractor_llm import Recorded, completion, server  # noqa: F401 (the fixture)
from tests.integration.test_memory_service import cmd

pytestmark = pytest.mark.integration

Opened = Callable[[], AbstractAsyncContextManager[MemoryApp]]


@pytest.fixture
def judged(infra, tmp_path: Path, server: tuple[str, Recorded]) -> Opened:  # type: ignore[no-untyped-def]  # noqa: F811
    url, _ = server

    @asynccontextmanager
    async def opened() -> AsyncIterator[MemoryApp]:
        settings = MemorySettings(
            home=tmp_path, nats_url=infra.nats_url, database_url=infra.database_url,
            namespace=infra.fresh_namespace(), memory_schema="mem_" + uuid.uuid4().hex[:8],
            truth_llm_url=url, truth_llm_model="judge-model", truth_llm_api_key="sk-judge",
        )
        async with memory_app(settings) as app:
            try:
                yield app
            finally:
                await app.bus.delete_streams()

    return opened


def opinion(verdict: str, confidence: float, reason: str) -> dict[str, object]:
    return completion(json.dumps({"verdict": verdict, "confidence": confidence, "reason": reason}))


async def test_a_sure_answer_settles_a_flagged_pair(judged: Opened, server: tuple[str, Recorded]) -> None:  # noqa: F811
    _, script = server
    script.answers.append((200, opinion("supersedes", 0.93, "Rex was renamed Bruno")))
    async with judged() as app:
        rex = await app.service.handle_command(cmd("save_memory", {"content": "My dog is called Rex"}))
        assert script.requests == []  # nothing near it: no question asked
        bruno = await app.service.handle_command(cmd("save_memory", {"content": "My dog is called Bruno"}))
        assert bruno.ok and bruno.result["supersedes"] == [rex.result["memory_id"]], bruno.result
        assert bruno.result["flagged"] == []
        old = await app.store.get("alice", UUID(rex.result["memory_id"]))
        assert old is not None and old.status is MemoryStatus.SUPERSEDED and old.superseded_by is not None
        assert old.superseded_by.decided_by == "llm" and old.superseded_by.reason == "Rex was renamed Bruno"
        assert old.superseded_by.confidence == 0.93
    asked = script.requests[0]
    assert asked["model"] == "judge-model" and asked["temperature"] == 0
    assert asked["response_format"]["json_schema"]["schema"]["properties"]["verdict"]["enum"] == [
        "supersedes", "duplicate", "uncertain", "unrelated"]
    question = asked["messages"][1]["content"]
    assert "Remembered (said " in question and "My dog is called Rex" in question and "My dog is called Bruno" in question
    assert script.headers[0]["Authorization"] == "Bearer sk-judge"


@pytest.mark.parametrize("answer", [
    (200, opinion("supersedes", 0.55, "maybe renamed")),  # not sure enough
    (200, opinion("uncertain", 0.9, "a second dog, or the same one renamed")),
    (200, completion("the dog was renamed, I think")),  # no JSON
    (200, completion(json.dumps({"verdict": "renamed", "confidence": 0.9, "reason": "x"}))),  # no such verdict
    (400, {"error": "bad request"}),  # refused: not retried, no answer
])
async def test_no_sure_answer_leaves_the_pair_flagged(judged: Opened, server: tuple[str, Recorded],  # noqa: F811
                                                      answer: tuple[int, object]) -> None:
    _, script = server
    script.answers.append(answer)
    async with judged() as app:
        rex = await app.service.handle_command(cmd("save_memory", {"content": "My dog is called Rex"}))
        bruno = await app.service.handle_command(cmd("save_memory", {"content": "My dog is called Bruno"}))
        assert bruno.ok and bruno.result["supersedes"] == [] and bruno.result["flagged"] == [rex.result["memory_id"]]
        new = await app.store.get("alice", UUID(bruno.result["memory_id"]))
        assert new is not None and [c.decided_by for c in new.conflicts] == ["rules"]
        old = await app.store.get("alice", UUID(rex.result["memory_id"]))
        assert old is not None and old.status is MemoryStatus.ACTIVE
    assert len(script.requests) == 1
