"""Issue 29 (an outside security review): each finding against the running stack where it was made.

M1 a huge plain-text ``turns`` is refused before it is parsed; L2 extreme dates are refused at the
contract (REST and MCP); L3 a forged graph cursor is an invalid argument; L4 a deeply nested JSON
body leaves the gateway's middleware standing; L6 every route checks the Host header (gateway and
auth service); the bulk ``client`` field and string numbers; issue 28's NUL characters over REST."""

from __future__ import annotations

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
