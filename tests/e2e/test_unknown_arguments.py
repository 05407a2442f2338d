"""An argument a tool does not have is refused naming it, never dropped without a word (issue 28):
`recall(..., as_of=…)` used to answer as if `as_of` had not been sent. With the `mcp` SDK client."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

from tests.e2e.test_daily_log_tools import session

pytestmark = pytest.mark.e2e


def test_an_unknown_argument_is_refused_naming_it(running) -> None:  # type: ignore[no-untyped-def]
    async def case() -> None:
        async with session(running.mcp_url, {"Authorization": f"Bearer {running.key}"}) as client:
            # (as_of is recall's own since issue 30; `since` is not)
            refused = await client.call_tool("recall", {"query": "tea", "since": "2025-01-01"})
            assert refused.is_error and "since" in refused.content[0].text and "query" in refused.content[0].text
            refused = await client.call_tool("save_memory", {"category": "preference", "content": "x", "tags": ["a"]})
            assert refused.is_error and "tags" in refused.content[0].text
            assert not (await client.call_tool("recall", {"query": "tea"})).is_error
        project = "pin-" + uuid.uuid4().hex[:6]
        pinned = {"Authorization": f"Bearer {running.key}", "X-Engram-Project": project}
        async with session(running.mcp_url, pinned) as client:  # containerTag is gone from a pinned connection
            same = await client.call_tool("memory", {"content": f"Pinned {project}", "containerTag": project})
            assert not same.is_error, same.content
            other = await client.call_tool("memory", {"content": "elsewhere", "containerTag": "other"})
            assert other.is_error and "containerTag" in other.content[0].text and project in other.content[0].text

    asyncio.run(case())


def test_an_unknown_query_parameter_is_refused_naming_it(running) -> None:  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {running.key}"}
    with httpx.Client(base_url=running.base_url + "/v1", headers=headers, timeout=30) as rest:
        listed = rest.get("/memories", params={"limit": 5, "asof": "2025-01-01"})  # (a typo of as_of)
        assert listed.status_code == 422, listed.text
        error = listed.json()["error"]
        assert error["field"] == "asof" and "limit" in error["message"] and "as_of" in error["message"], error
        assert rest.get("/memories", params={"limit": 5}).status_code == 200
        twice = rest.get("/memories", params=[("limit", 5), ("limit", 6)])
        assert twice.status_code == 422 and twice.json()["error"]["field"] == "limit", twice.text
