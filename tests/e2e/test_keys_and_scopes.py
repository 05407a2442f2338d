"""API keys managed over REST by an admin; scopes and project restrictions enforced everywhere."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

pytestmark = pytest.mark.e2e


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_admin_manages_keys_over_rest(running) -> None:  # type: ignore[no-untyped-def]
    admin = (await asyncio.to_thread(running.stack.create_key, running.user_id, "admin", ["admin"]))["key"]
    async with httpx.AsyncClient(base_url=running.base_url, timeout=30) as h:
        refused = await h.post("/v1/keys", json={"name": "x"}, headers=auth(running.key))
        assert refused.status_code == 403 and "admin" in refused.text
        created = await h.post("/v1/keys", headers=auth(admin), json={
            "user_id": running.user_id, "name": "read-only work key", "scopes": ["memory:read"], "project": "work",
            "expires_in_days": 30,
        })
        assert created.status_code == 201, created.text
        body = created.json()
        reader, key_id = body["key"], body["view"]["key_id"]
        assert reader.startswith("egm_") and body["view"]["expires_at"]
        listed = (await h.get("/v1/keys", params={"user_id": running.user_id}, headers=auth(admin))).json()["keys"]
        assert key_id in {k["key_id"] for k in listed} and all("key" not in k for k in listed)

        # read-only, restricted to one project
        save = await h.post("/v1/memories", json={"content": "nope"}, headers=auth(reader))
        assert save.status_code == 403
        assert 'insufficient_scope' in save.headers.get("www-authenticate", "")
        other_project = await h.post("/v1/recall", json={"query": "x", "project": "home"}, headers=auth(reader))
        assert other_project.status_code == 403
        assert (await h.post("/v1/recall", json={"query": "x"}, headers=auth(reader))).status_code == 200
        who = (await h.get("/v1/whoami", headers=auth(reader))).json()
        assert who["scopes"] == ["memory:read"] and who["project"] == "work"

        revoked = await h.delete(f"/v1/keys/{key_id}", headers=auth(admin))
        assert revoked.status_code == 200 and revoked.json()["revoked_at"]
        after = await h.get("/v1/whoami", headers=auth(reader))
        assert after.status_code == 401
        unknown = await h.delete(f"/v1/keys/{uuid.uuid4()}", headers=auth(admin))
        assert unknown.status_code == 404
        bad = await h.post("/v1/keys", headers=auth(admin), json={"name": "x", "scopes": ["root"]})
        assert bad.status_code == 422 and bad.json()["error"]["field"].startswith("scopes")
