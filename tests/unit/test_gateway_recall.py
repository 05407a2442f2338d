"""The `recall` tool's conversation with the memory service: one query that brings the profile
along, and the two-query fallback while a memory replica older than the gateway still runs."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from contracts.errors import ErrorBody, ErrorCode
from services.gateway.adapters.backend import Backend, BackendError
from services.gateway.entrypoints.mcp_tools import build_tools

pytestmark = pytest.mark.unit

HIT = {"memory": {"id": "00000000-0000-0000-0000-000000000001", "content": "Likes green tea", "project": "default",
                  "category": None, "memory_key": None, "importance": 3, "confidence": 1.0, "source": "mcp",
                  "version": 1, "status": "active", "created_at": "2026-01-01T00:00:00Z",
                  "updated_at": "2026-01-01T00:00:00Z"}, "score": 0.5}
PROFILE = {"static": [HIT["memory"] | {"content": "Lives in Lisbon", "category": "user_profile"}], "dynamic": []}


class RecordingBackend(Backend):
    def __init__(self, *, old_memory_service: bool = False) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.old = old_memory_service

    async def query_memory(self, tenant: str, name: str, payload: dict[str, Any]) -> Any:
        self.calls.append((name, dict(payload)))
        if name == "profile":
            return PROFILE
        if self.old and "include_profile" in payload:  # what a replica without the field answers
            raise BackendError(ErrorBody(code=ErrorCode.INVALID_ARGUMENT, field="include_profile",
                                         message="include_profile: Extra inputs are not permitted"))
        return {"hits": [HIT], **({"profile": PROFILE} if payload.get("include_profile") else {})}


@pytest.fixture(autouse=True)
def signed_in() -> Any:
    token = AccessToken(token="k", client_id="c", scopes=["memory:read"], subject="alice")
    reset = auth_context_var.set(AuthenticatedUser(token))
    yield
    auth_context_var.reset(reset)


def recall_tool(backend: Backend) -> Any:
    return next(fn for fn, name, *_ in build_tools(backend) if name == "recall")


async def test_recall_with_profile_is_one_query() -> None:
    backend = RecordingBackend()
    text = await recall_tool(backend)(query="tea")
    assert [name for name, _ in backend.calls] == ["recall"]
    assert backend.calls[0][1]["include_profile"] is True
    assert "Lives in Lisbon" in text and "Likes green tea" in text


async def test_recall_without_profile_sends_no_profile_field() -> None:
    backend = RecordingBackend(old_memory_service=True)
    text = await recall_tool(backend)(query="tea", includeProfile=False)
    assert backend.calls == [("recall", {"query": "tea", "project": None, "limit": 10})]
    assert "Likes green tea" in text and "Lives in Lisbon" not in text


async def test_an_older_memory_service_gets_the_two_queries() -> None:
    backend = RecordingBackend(old_memory_service=True)
    text = await recall_tool(backend)(query="tea")
    assert sorted(name for name, _ in backend.calls) == ["profile", "recall", "recall"]
    assert "Lives in Lisbon" in text and "Likes green tea" in text
