"""Issue 29 (an outside security review): each finding against the running stack where it was made.

M1 a huge plain-text ``turns`` is refused before it is parsed; L2 extreme dates are refused at the
contract (REST and MCP); L3 a forged graph cursor is an invalid argument; L4 a deeply nested JSON
body leaves the gateway's middleware standing; L6 every route checks the Host header (gateway and
auth service); the bulk ``client`` field and string numbers; issue 28's NUL characters over REST."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from pathlib import Path

import httpx
import pytest

from contracts.daily_logs import MAX_TURNS_TEXT_CHARS
from tests.e2e.test_gateway_edge import MCP_HEADERS, gateway
from tests.e2e.test_mcp_gateway import mcp_client, text_of

pytestmark = pytest.mark.e2e


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# --- M1: one request froze a gateway ---------------------------------------------------------------

async def test_m1_a_huge_turns_text_is_refused_naming_turns_and_the_limit(running) -> None:  # type: ignore[no-untyped-def]
    huge = "user: hello\n" + "and then some more words\n" * 24_000  # 600 kB: the review's stalling size
    async with mcp_client(running.mcp_url, running.key) as client:
        refused = await client.call_tool("save_daily_log", {"turns": huge, "containerTag": "review29-m1"})
        assert refused.is_error
        message = text_of(refused)
        assert "turns" in message and str(MAX_TURNS_TEXT_CHARS) in message, message
        saved = await client.call_tool("save_daily_log", {"turns": "user: hello\nassistant: hi",
                                                          "containerTag": "review29-m1"})
        assert not saved.is_error, text_of(saved)


# --- L2: extreme dates -----------------------------------------------------------------------------

@pytest.mark.parametrize("moment", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59Z"])
async def test_l2_a_delete_cut_off_at_the_calendar_edge_is_a_422_naming_older_than(running, moment) -> None:  # type: ignore[no-untyped-def]
    key = (await asyncio.to_thread(running.stack.create_key, running.user_id, "maint-" + uuid.uuid4().hex[:6],
                                   ["memory:read", "memory:write", "memory:maintenance"]))["key"]
    async with httpx.AsyncClient(base_url=running.base_url, headers=bearer(key), timeout=30) as http:
        r = await http.delete("/v1/daily-logs", params={"older_than": moment, "project": "review29-l2"})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"] == "older_than" and "1900" in error["message"] and "2999" in error["message"]


@pytest.mark.parametrize("moment", ["0001-01-01T00:00:00Z", "9999-12-31T00:00:00Z"])
async def test_l2_a_turn_at_the_calendar_edge_is_refused_naming_it(running, moment) -> None:  # type: ignore[no-untyped-def]
    turns = [{"speaker": "user", "text": "Yesterday I moved to Lyon.", "at": moment}]
    async with httpx.AsyncClient(base_url=running.base_url, headers=bearer(running.key), timeout=30) as http:
        r = await http.post("/v1/daily-logs", json={"project": "review29-l2", "turns": turns})
        day = await http.post("/v1/daily-logs", json={"project": "review29-l2", "log_date": moment[:10]})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == "turns" and "turns[0].at" in r.json()["error"]["message"]
    assert day.status_code == 422 and day.json()["error"]["field"] == "log_date", day.text
    async with mcp_client(running.mcp_url, running.key) as client:
        refused = await client.call_tool("save_daily_log", {"turns": turns, "containerTag": "review29-l2"})
    assert refused.is_error and "turns[0].at" in text_of(refused)
