"""The operations moved into the gateway's catalogue last (issue 28): their REST routes are
generated from the contracts and run through ``Operations.run``, and their rules still hold —
tried from outside with httpx and the `mcp` SDK client against a running stack.

- forget: exactly one of content or memory_id, refused naming the field;
- update_log_status: the contract's rule across fields (processed with an error_reason) refused
  in the body with a message naming ``error_reason``, as the MCP tool refuses it;
- get_memory_by_key: the 80-character limit now in the contract, on REST and MCP alike;
- profile: the contract's limits are REST's query parameters (and refused out of range);
- API keys: the operator rule (``admin``, never with a project restriction) on the generated routes;
- a write without a project by a project-restricted key lands in its project (the request's
  project, not the contract's default, goes to the row's rule)."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

from tests.e2e.test_project_restriction import auth, mcp_client, text_of

pytestmark = pytest.mark.e2e


def _refused(r: httpx.Response, field: str) -> None:
    assert r.status_code == 422, (r.status_code, r.text)
    assert r.json()["error"]["code"] == "invalid_argument" and r.json()["error"]["field"] == field, r.text


def test_forget_takes_exactly_one_of_content_or_memory_id(running) -> None:  # type: ignore[no-untyped-def]
    project = "rows-forget-" + uuid.uuid4().hex[:6]
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(running.key), timeout=60) as h:
        saved = h.post("/memories", json={"content": "Owns a red kayak", "project": project})
        assert saved.status_code == 201, saved.text
        _refused(h.post("/memories/forget", json={"project": project}), "content")
        _refused(h.post("/memories/forget", json={"project": project, "content": "Owns a red kayak",
                                                   "memory_id": saved.json()["memory_id"]}), "content")
        forgot = h.post("/memories/forget", json={"project": project, "memory_id": saved.json()["memory_id"],
                                                  "reason": "sold it"})
        assert forgot.status_code == 200 and forgot.json()["forgotten"] is True, forgot.text


def test_a_processed_status_with_an_error_reason_is_refused_naming_it(running) -> None:  # type: ignore[no-untyped-def]
    project = "rows-status-" + uuid.uuid4().hex[:6]
    worker = running.stack.create_key(running.user_id, "rows worker",
                                      ["memory:read", "memory:write", "memory:maintenance"])["key"]
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(worker), timeout=60) as h:
        moved = h.put(f"/projects/{project}/extraction-mode", json={"mode": "agent"})  # the engine leaves it
        assert moved.status_code == 200, moved.text
        saved = h.post("/daily-logs", json={"project": project, "events": "Went sailing"})
        assert saved.status_code == 200, saved.text
        log_id = saved.json()["id"]
        both = h.post(f"/daily-logs/{log_id}/status", json={"processing_status": "processed", "error_reason": "x"})
        _refused(both, "body")  # a rule across fields: the body, its message naming the field
        assert "error_reason: a log with an error_reason cannot be marked processed" in both.json()["error"]["message"]
        _refused(h.post(f"/daily-logs/{log_id}/status", json={"processing_status": "failed", "id": log_id}), "id")
        assert h.post(f"/daily-logs/{log_id}/claim").json()["claimed"] is True
        failed = h.post(f"/daily-logs/{log_id}/status", json={"processing_status": "failed",
                                                               "error_reason": "model timed out"})
        assert failed.status_code == 200 and failed.json()["log"]["processing_status"] == "failed", failed.text


def test_a_memory_key_over_80_characters_is_refused_on_rest_and_mcp(running) -> None:  # type: ignore[no-untyped-def]
    long_key = "x" * 16 + "." + "a" * 64  # 81 characters, within the key's pattern
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(running.key), timeout=60) as h:
        _refused(h.get("/memories/by-key", params={"memory_key": long_key}), "memory_key")
        missing = h.get("/memories/by-key", params={"memory_key": long_key[1:]})  # 80: the limit
        assert missing.status_code == 200 and missing.json()["found"] is False, missing.text

    async def over_mcp() -> None:
        async with mcp_client(running, running.key) as client:
            refused = await client.call_tool("get_memory_by_key", {"memory_key": long_key})
            assert refused.is_error and "memory_key" in text_of(refused) and "80" in text_of(refused), text_of(refused)

    asyncio.run(over_mcp())


def test_the_profile_takes_the_contracts_limits(running) -> None:  # type: ignore[no-untyped-def]
    project = "rows-profile-" + uuid.uuid4().hex[:6]
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(running.key), timeout=60) as h:
        for topic in ("food", "music"):
            saved = h.post("/memories", json={"category": "preference", "memory_key": f"preference.{topic}",
                                              "content": f"Likes {topic} a lot", "project": project})
            assert saved.status_code == 201, saved.text
        both = h.get("/profile", params={"project": project})
        one = h.get("/profile", params={"project": project, "static_limit": 1})
        assert both.status_code == 200 and len(both.json()["static"]) == 2, both.text
        assert one.status_code == 200 and len(one.json()["static"]) == 1, one.text
        _refused(h.get("/profile", params={"static_limit": 101}), "static_limit")


def test_keys_keep_the_operator_rule(running) -> None:  # type: ignore[no-untyped-def]
    admin = running.stack.create_key(running.user_id, "rows admin", ["admin"])["key"]
    with httpx.Client(base_url=running.base_url + "/v1", timeout=60) as h:
        made = h.post("/keys", headers=auth(admin), json={
            "user_id": running.user_id, "name": "rows restricted", "scopes": ["memory:read", "memory:write"],
            "project": "rows-work"})
        assert made.status_code == 201, made.text
        listed = h.get("/keys", headers=auth(admin), params={"user_id": running.user_id})
        assert made.json()["view"]["key_id"] in [k["key_id"] for k in listed.json()["keys"]], listed.text
        assert h.get("/keys", headers=auth(running.key)).status_code == 403  # no admin scope
        # a write without a project lands in the key's own project
        restricted = made.json()["key"]
        saved = h.post("/memories", headers=auth(restricted), json={"content": "Rows restricted " + uuid.uuid4().hex})
        assert saved.status_code == 201 and saved.json()["project"] == "rows-work", saved.text
        other = h.post("/memories", headers=auth(restricted), json={"content": "elsewhere", "project": "rows-home"})
        assert other.status_code == 403, other.text
        revoked = h.delete(f"/keys/{made.json()['view']['key_id']}", headers=auth(admin))
        assert revoked.status_code == 200 and revoked.json()["revoked_at"], revoked.text
        assert h.get("/whoami", headers=auth(restricted)).status_code == 401
