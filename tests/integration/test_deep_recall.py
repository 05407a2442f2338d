"""Deep recall through the real memory service (NATS, Postgres, the embedded engine, the shipped
encoders): the answer about the person a question names comes first although another person's
memories match its words better, and a question joining two people finds each one's memory (issue 34)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contracts.envelope import CommandEnvelope, QueryEnvelope
from contracts.memory import Recall, RecallMode
from services.memory.config import MemorySettings
from services.memory.main import MemoryApp, memory_app

pytestmark = pytest.mark.integration

CAROLINE = [
    "Caroline: I painted a sunset over the lake last weekend.",
    "Caroline: My new painting of a lighthouse is almost done.",
    "Caroline: I painted my grandma's garden for the art show.",
    "Caroline: Painting the horses at the farm was so relaxing.",
    "Caroline: I painted a portrait of my friend for her birthday.",
    "Caroline: I love painting landscapes in watercolour.",
]
MELANIE = "Melanie: The sunset I painted with the kids is on our fridge now."
OTHERS = ["Melanie: We went camping with the kids in June.", "Melanie: I signed up for a pottery class."]
QUESTION = "What have Caroline and Melanie both painted?"
# John's book is in one memory; Tim talks about books (and to John) in six
TIM = [
    "Tim: I have read so many fantasy books this year, John.",
    "Tim: Reading books before bed is my favourite habit.",
    "Tim: John, have you read any good books lately? I read a lot.",
    "Tim: My bookshelf is full of books I have read twice.",
    "Tim: I read books about dragons and wizards all the time.",
    "Tim: I've read every book by Patrick Rothfuss.",
]
DUNE = "John: I just finished Dune by Frank Herbert, what a ride."


@pytest.fixture
async def app(infra, tmp_path: Path) -> AsyncIterator[MemoryApp]:  # type: ignore[no-untyped-def]
    settings = MemorySettings(
        home=tmp_path, nats_url=infra.nats_url, database_url=infra.database_url,
        namespace=infra.fresh_namespace(), memory_schema="mem_" + uuid.uuid4().hex[:8],
    )
    async with memory_app(settings) as a:
        try:
            yield a
        finally:
            await a.bus.delete_streams()


async def _save(app: MemoryApp, content: str) -> None:
    env = CommandEnvelope(command_id=uuid.uuid4().hex, type="save_memory", tenant="alice", payload={"content": content})
    assert (await app.service.handle_command(env)).ok


async def test_deep_recall_puts_first_the_memory_about_whom_the_question_names(app: MemoryApp) -> None:
    for content in [*TIM, DUNE, "John: Basketball practice ran late again."]:
        await _save(app, content)
    question = "What books has John read?"
    default = await app.service.recall("alice", Recall(query=question, limit=8))
    deep = await app.service.recall("alice", Recall(query=question, limit=8, mode=RecallMode.DEEP))
    assert deep.hits[0].memory.content == DUNE
    rank = {mode: [h.memory.content for h in r.hits].index(DUNE) for mode, r in (("default", default), ("deep", deep))}
    assert rank["deep"] <= rank["default"]
    assert {h.memory.id for h in deep.hits} == {h.memory.id for h in default.hits}  # re-ordered, nothing lost
    assert all(0 < h.score <= 1 for h in deep.hits)


async def test_deep_recall_finds_the_memory_of_each_person_a_question_joins(app: MemoryApp) -> None:
    for content in [*CAROLINE, MELANIE, *OTHERS]:
        await _save(app, content)
    deep = await app.service.recall("alice", Recall(query=QUESTION, limit=3, mode=RecallMode.DEEP))
    found = [h.memory.content for h in deep.hits]
    assert len(found) == 3
    assert MELANIE in found  # the second person's memory, among six of the first person's
    assert any(c in CAROLINE for c in found)
    assert 0 < deep.hits[-1].score <= deep.hits[0].score <= 1  # fused rank scores
    # the sub-question about Melanie alone puts her painting first: that is the hop deep recall adds
    part = await app.service.recall("alice", Recall(query="What have Melanie painted?", limit=1))
    assert part.hits[0].memory.content == MELANIE
    again = await app.service.recall("alice", Recall(query=QUESTION, limit=3, mode=RecallMode.DEEP))
    assert again == deep  # deterministic


async def test_deep_mode_through_the_query_subject(app: MemoryApp) -> None:
    for content in [*CAROLINE[:2], MELANIE]:
        await _save(app, content)
    reply = await app.service.handle_query(
        QueryEnvelope(type="recall", tenant="alice", payload={"query": QUESTION, "mode": "deep", "limit": 3})
    )
    assert reply.ok, reply
    assert MELANIE in [h["memory"]["content"] for h in reply.result["hits"]]
