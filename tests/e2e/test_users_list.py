"""GET /v1/users from outside: an unrestricted admin key lists the install's users (never a
password); a key without admin, and any key restricted to a project, are refused."""

from __future__ import annotations

import uuid

import httpx
import pytest

pytestmark = pytest.mark.e2e


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_admin_lists_users_and_others_are_refused(running) -> None:  # type: ignore[no-untyped-def]
    run = uuid.uuid4().hex[:6]
    admin = running.stack.create_key(running.user_id, f"ul-admin-{run}", ["admin"])["key"]
    worker = running.stack.create_key(running.user_id, f"ul-worker-{run}",
                                      ["memory:read", "memory:write", "memory:maintenance"])["key"]
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        listed = h.get("/v1/users", headers=auth(admin))
        assert listed.status_code == 200, listed.text
        users = {u["user_id"]: u for u in listed.json()["users"]}
        assert {running.user_id, running.other_user_id} <= set(users)
        assert users[running.user_id]["username"] == running.username and users[running.user_id]["disabled"] is False
        assert "password" not in listed.text and running.password not in listed.text
        restricted = h.post("/v1/keys", headers=auth(admin), json={
            "user_id": running.user_id, "name": f"ul-work-{run}", "scopes": ["memory:read"], "project": "work"})
        assert restricted.status_code == 201, restricted.text
        for key in (worker, running.other_key, restricted.json()["key"]):
            refused = h.get("/v1/users", headers=auth(key))
            assert refused.status_code == 403, refused.text
            assert running.user_id not in refused.text
        assert h.get("/v1/users").status_code == 401
