"""The `recall` tool's conversation with the memory service: one typed query that brings the
profile along when asked, and none of it when not (the best hits' relations are asked for apart:
tests/unit/test_relations.py)."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from pydantic import BaseModel

from contracts.graph import RelatedMemories, SimilarMemories
from contracts.memory import MemoryHistoryQuery, Profile, Recall, RecallResult
from services.gateway.entrypoints.mcp_tools import build_tools
from services.gateway.operations import Operations

pytestmark = pytest.mark.unit

HIT = {"memory": {"id": "00000000-0000-0000-0000-000000000001", "content": "Likes green tea", "project": "default",
                  "category": None, "memory_key": None, "importance": 3, "confidence": 1.0, "source": "mcp",
                  "version": 1, "status": "active", "created_at": "2026-01-01T00:00:00Z",
                  "updated_at": "2026-01-01T00:00:00Z"}, "score": 0.5}
PROFILE = {"static": [HIT["memory"] | {"content": "Lives in Lisbon", "category": "user_profile"}], "dynamic": []}


class RecordingClient:
    """Stands in for the bus client: records the typed queries and answers them."""

    def __init__(self) -> None:
        self.calls: list[BaseModel] = []

    async def ask(self, tenant: str | None, query: BaseModel, *, project_scope: str | None = None) -> Any:
        if isinstance(query, RelatedMemories | SimilarMemories | MemoryHistoryQuery):  # relations: not what these tests are about
            raise TimeoutError
        self.calls.append(query)
        assert isinstance(query, Recall)
        return RecallResult.model_validate(
            {"hits": [HIT], "profile": Profile.model_validate(PROFILE) if query.include_profile else None})


@pytest.fixture(autouse=True)
def signed_in() -> Any:
    token = AccessToken(token="k", client_id="c", scopes=["memory:read"], subject="alice")
    reset = auth_context_var.set(AuthenticatedUser(token))
    yield
    auth_context_var.reset(reset)


def recall_tool(client: RecordingClient) -> Any:
    return next(fn for fn, name, *_ in build_tools(Operations(client)) if name == "recall")  # type: ignore[arg-type]


async def test_recall_with_profile_is_one_query() -> None:
    client = RecordingClient()
    text = await recall_tool(client)(query="tea")
    assert len(client.calls) == 1 and isinstance(client.calls[0], Recall)
    assert client.calls[0].include_profile is True
    assert "Lives in Lisbon" in text and "Likes green tea" in text


async def test_recall_without_profile_asks_for_none() -> None:
    client = RecordingClient()
    text = await recall_tool(client)(query="tea", includeProfile=False)
    assert client.calls == [Recall(query="tea", project=None, limit=10)]
    assert "Likes green tea" in text and "Lives in Lisbon" not in text
