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


# --- L3: a forged graph cursor ---------------------------------------------------------------------

def forged(cursor: str, seq: int) -> str:
    data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    data["s"] = seq
    return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode().rstrip("=")


async def test_l3_a_cursor_past_a_bigint_is_an_invalid_argument_naming_cursor(running) -> None:  # type: ignore[no-untyped-def]
    project = "review29-l3-" + uuid.uuid4().hex[:6]
    async with httpx.AsyncClient(base_url=running.base_url, headers=bearer(running.key), timeout=30) as http:
        for fact in ("Owns a red kayak", "Grows tomatoes on the balcony"):
            assert (await http.post("/v1/memories", json={"content": fact, "project": project})).status_code == 201
    async with mcp_client(running.mcp_url, running.key) as client:
        cursor = None
        for _ in range(300):  # the graph projects the saves in a moment
            page = await client.call_tool("fetch-graph-data", {"project": project, "limit": 1})
            assert not page.is_error, text_of(page)
            cursor = (page.structured_content or {}).get("next_cursor")
            if cursor:
                break
            await asyncio.sleep(0.1)
        assert cursor, "the graph never had two nodes"
        for seq in (2**63, 2**64 + 5, 10**30):
            refused = await client.call_tool("fetch-graph-data", {"project": project, "cursor": forged(cursor, seq)})
            message = text_of(refused)
            assert refused.is_error and "invalid_argument" in message and "'cursor'" in message, message
            assert "internal" not in message
        assert not (await client.call_tool("fetch-graph-data", {"project": project, "cursor": cursor})).is_error


# --- L4: a deeply nested JSON body -----------------------------------------------------------------

DEPTH = 100_000
DEEP_BODIES = {
    "arrays": b"[" * DEPTH + b"]" * DEPTH,
    "objects": b'{"a":' * DEPTH + b"1" + b"}" * DEPTH,
    "naming clientInfo": b'{"method":"initialize","params":{"clientInfo":' + b"[" * DEPTH + b"]" * DEPTH + b"}}",
}


def server_errors(tmp_path: Path) -> str:
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("gateway-*.log"))
    return "\n".join(line for line in logs.splitlines()
                     if "Exception in ASGI application" in line or "RecursionError" in line or "Traceback" in line)


async def test_l4_a_deeply_nested_body_is_refused_and_the_gateway_stays_whole(running, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with gateway(running, tmp_path) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            for name, body in DEEP_BODIES.items():
                for path in ("/mcp", "/"):
                    r = await http.post(path, content=body, headers={**MCP_HEADERS, **bearer(running.key)})
                    assert 400 <= r.status_code < 500, (name, path, r.status_code, r.text[:300])
            assert (await http.post("/mcp", content=b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
                                    headers={**MCP_HEADERS, **bearer(running.key)})).status_code == 200
        assert server_errors(tmp_path) == ""


async def test_l4_a_deeply_nested_body_that_is_rate_limited_gets_its_429(running, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with gateway(running, tmp_path, ENGRAM_RATE_LIMIT_PER_MINUTE="1", ENGRAM_RATE_LIMIT_BURST="1") as url:
        deep = b"[" * 30_000 + b"]" * 30_000  # under the 64 KiB the refusal reads to echo a JSON-RPC id
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            statuses = [(await http.post("/mcp", content=deep, headers={**MCP_HEADERS, **bearer(running.key)})).status_code
                        for _ in range(3)]
        assert statuses[-1] == 429 and all(s < 500 for s in statuses), statuses
        assert server_errors(tmp_path) == ""


# --- L5: `engram export -o FILE` -------------------------------------------------------------------

def test_l5_an_export_file_is_readable_by_its_owner_only(running, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import stat

    from tests.e2e.test_portability import engram

    out = tmp_path / "alice.jsonl"
    stale = tmp_path / "alice.jsonl.partial"  # left by an interrupted export, world-readable
    stale.write_text("old")
    stale.chmod(0o644)
    before = os.umask(0o022)  # the usual default: files 0644
    try:
        engram(running, tmp_path, "export", "--user", running.user_id, "-o", str(out))
    finally:
        os.umask(before)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert json.loads(out.read_text().splitlines()[0])["type"] == "header" and not stale.exists()


# --- L6: the Host check on every route -------------------------------------------------------------

GATEWAY_ROUTES = [("GET", "/v1/whoami"), ("GET", "/v1/memories"), ("POST", "/v1/recall"), ("GET", "/graph"),
                  ("GET", "/metrics"), ("GET", "/"), ("GET", "/docs"), ("GET", "/openapi.json"),
                  ("GET", "/.well-known/oauth-protected-resource"), ("POST", "/mcp")]
AUTH_ROUTES = [("GET", "/login"), ("GET", "/signup"), ("GET", "/consent"), ("GET", "/authorize"), ("POST", "/token"),
               ("POST", "/register"), ("POST", "/revoke"), ("GET", "/logout")]


async def test_l6_every_gateway_route_refuses_a_rebound_host(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(base_url=running.base_url, headers=bearer(running.key), timeout=30) as http:
        for method, path in GATEWAY_ROUTES:
            for host in ("evil.example", "evil.example:80", "127.0.0.1.evil.example:8080"):
                r = await http.request(method, path, headers={"Host": host, **MCP_HEADERS},
                                       json={"query": "x"} if path == "/v1/recall" else None)
                assert r.status_code == 421, (method, path, host, r.status_code, r.text[:200])
                assert r.json()["error"]["field"] == "Host"
            assert (await http.request(method, path, json={"query": "x"} if path == "/v1/recall" else None,
                                       headers=MCP_HEADERS)).status_code != 421
        for probe in ("/health", "/healthz", "/readyz"):  # an orchestrator probes the pod's address
            assert (await http.get(probe, headers={"Host": "10.1.2.3:8080"})).status_code == 200


async def test_l6_every_auth_route_refuses_a_rebound_host(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(base_url=running.auth_url, timeout=30) as http:
        for method, path in AUTH_ROUTES:
            r = await http.request(method, path, headers={"Host": "evil.example"})
            assert r.status_code == 421, (method, path, r.status_code, r.text[:200])
            assert (await http.request(method, path)).status_code != 421
        login = await http.get("/login", headers={"Host": "evil.example"})
        assert "password" not in login.text.lower()
        for path in ("/healthz", "/.well-known/oauth-authorization-server"):  # probes; the gateway's in-cluster fetch
            assert (await http.get(path, headers={"Host": "auth:8081"})).status_code == 200


async def test_l6_an_allowed_host_is_answered_on_every_route(running, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with gateway(running, tmp_path, ENGRAM_ALLOWED_HOSTS='["gateway.engram.svc"]') as url:
        async with httpx.AsyncClient(base_url=url, headers=bearer(running.key), timeout=30) as http:
            assert (await http.get("/v1/whoami", headers={"Host": "gateway.engram.svc"})).status_code == 200
            assert (await http.get("/v1/whoami", headers={"Host": "gateway.engram.svc.evil"})).status_code == 421


# --- issue 28: NUL characters over REST ------------------------------------------------------------

@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/memories/forget", {"content": "bad\u0000content"}, "content"),
    ("/v1/memories/forget", {"content": "anything", "reason": "bad\u0000reason"}, "reason"),
    ("/v1/memories", {"content": "Likes tea", "source": "bad\u0000source"}, "source"),
])
async def test_issue28_a_nul_character_is_a_422_naming_the_field(running, path, body, field) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(base_url=running.base_url, headers=bearer(running.key), timeout=30) as http:
        r = await http.post(path, json={**body, "project": "review29-nul"})
    assert r.status_code == 422, (r.status_code, r.text)
    assert r.json()["error"]["code"] == "invalid_argument" and r.json()["error"]["field"] == field, r.text


# --- minor: who wrote it comes from the connection; numbers are numbers ----------------------------

async def test_minor_a_body_never_sets_the_client_label_of_a_write(running) -> None:  # type: ignore[no-untyped-def]
    project = "review29-client-" + uuid.uuid4().hex[:6]
    async with httpx.AsyncClient(base_url=running.base_url, headers=bearer(running.key), timeout=30) as http:
        bulk = await http.post("/v1/memories/bulk", json={"project": project, "memories": [
            {"content": "Plays the cello " + uuid.uuid4().hex[:6], "client": "forged-assistant/6.6.6"}]})
        one = await http.post("/v1/memories", json={"project": project, "content": "Keeps a diary " + uuid.uuid4().hex[:6],
                                                    "client": "forged-assistant/6.6.6"})
        assert bulk.status_code == 200 and bulk.json()["saved"] == 1, bulk.text
        assert one.status_code == 201, one.text
        for memory_id in (bulk.json()["results"][0]["memory_id"], one.json()["memory_id"]):
            versions = (await http.get(f"/v1/memories/{memory_id}/history")).json()["versions"]
            assert all(v.get("client") is None for v in versions), versions  # REST: no MCP client, and no forgery
    async with mcp_client(running.mcp_url, running.key) as client:
        saved = await client.call_tool("save_memories", {"containerTag": project, "memories": [
            {"content": "Speaks Basque " + uuid.uuid4().hex[:6], "client": "forged-assistant/6.6.6"}]})
        assert not saved.is_error, text_of(saved)
        memory_id = saved.structured_content["results"][0]["memory_id"]
    async with httpx.AsyncClient(base_url=running.base_url, headers=bearer(running.key), timeout=30) as http:
        versions = (await http.get(f"/v1/memories/{memory_id}/history")).json()["versions"]
    assert versions[-1].get("client") and "forged" not in versions[-1]["client"], versions


async def test_minor_numbers_given_as_strings_are_refused_naming_the_field(running) -> None:  # type: ignore[no-untyped-def]
    async with mcp_client(running.mcp_url, running.key) as client:
        refused = await client.call_tool("recall", {"query": "tea", "limit": "10"})
        assert refused.is_error and "limit" in text_of(refused), text_of(refused)
        assert not (await client.call_tool("recall", {"query": "tea", "limit": 10})).is_error
    key = (await asyncio.to_thread(running.stack.create_key, running.user_id, "maint-" + uuid.uuid4().hex[:6],
                                   ["memory:read", "memory:write", "memory:maintenance"]))["key"]
    async with httpx.AsyncClient(base_url=running.base_url, headers=bearer(key), timeout=30) as http:
        r = await http.post("/v1/extraction-tasks", json={"task_id": "review29-" + uuid.uuid4().hex[:6],
                                                          "metrics": {"prompt_tokens": "12"}})
    assert r.status_code == 422 and r.json()["error"]["field"].startswith("metrics"), r.text
