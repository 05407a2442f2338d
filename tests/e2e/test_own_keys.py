"""A user's own API keys over REST (``/v1/me/keys``, the console's Keys page), from outside as an
attacker would try them: a credential with ``keys:manage`` makes keys for its own user with at most
its own scopes and project, lists and revokes only its own (a restricted one: its project's), and a
revoked key stops working at once. Without ``keys:manage`` nothing is reachable; ``admin``,
``memory:act-as`` and ``keys:manage`` are never granted this way."""

from __future__ import annotations

import uuid

import httpx
import pytest

pytestmark = pytest.mark.e2e


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_a_user_manages_keys_of_their_own_and_nobody_elses(running) -> None:  # type: ignore[no-untyped-def]
    stack = running.stack
    manager = stack.create_key(running.user_id, "console", ["memory:read", "memory:write", "keys:manage"])["key"]
    reader = stack.create_key(running.user_id, "reader", ["memory:read", "keys:manage"])["key"]
    bob_manager = stack.create_key(running.other_user_id, "bob console", ["memory:read", "keys:manage"])["key"]
    with httpx.Client(base_url=running.base_url + "/v1", timeout=60) as h:
        # without keys:manage: refused, naming the scope
        plain = h.get("/me/keys", headers=auth(running.key))
        assert plain.status_code == 403 and "keys:manage" in plain.headers.get("www-authenticate", ""), plain.text

        made = h.post("/me/keys", headers=auth(manager) | {"Idempotency-Key": "own-key-" + uuid.uuid4().hex},
                      json={"name": "laptop", "scopes": ["memory:read"], "project": "travel"})
        assert made.status_code == 201, made.text
        laptop = made.json()
        assert laptop["key"] and laptop["view"]["user_id"] == running.user_id, laptop
        assert (laptop["view"]["scopes"], laptop["view"]["project"]) == (["memory:read"], "travel"), laptop
        # the new key works, for its own user, in its project only
        who = h.get("/whoami", headers=auth(laptop["key"])).json()
        assert (who["user_id"], who["project"], who["scopes"]) == (running.user_id, "travel", ["memory:read"]), who

        # more than the asking credential holds: refused, naming the field; never admin, act-as or keys:manage
        more = h.post("/me/keys", headers=auth(reader), json={"name": "x", "scopes": ["memory:read", "memory:write"]})
        assert more.status_code == 403 and more.json()["error"]["field"] == "scopes", more.text
        for scope in ("admin", "memory:act-as", "keys:manage"):
            escalate = h.post("/me/keys", headers=auth(manager), json={"name": "x", "scopes": [scope]})
            assert escalate.status_code == 422 and "scopes" in escalate.text, (scope, escalate.text)
        # a user id in the body is no way to reach another user
        smuggled = h.post("/me/keys", headers=auth(manager), json={"name": "x", "user_id": running.other_user_id})
        assert smuggled.status_code == 422 and "user_id" in smuggled.text, smuggled.text

        # a key restricted to a project makes keys of that project only, and sees that project's keys only
        travel = h.post("/me/keys", headers=auth(manager), json={
            "name": "travel console", "scopes": ["memory:read"], "project": "travel"}).json()["key"]
        assert h.get("/me/keys", headers=auth(travel)).status_code == 403  # (it has no keys:manage)
        admin = stack.create_key(running.user_id, "operator", ["admin"])["key"]
        scoped = h.post("/keys", headers=auth(admin), json={
            "user_id": running.user_id, "name": "travel manager", "scopes": ["memory:read", "keys:manage"],
            "project": "travel"})
        assert scoped.status_code == 201, scoped.text
        travel_manager = scoped.json()["key"]
        elsewhere = h.post("/me/keys", headers=auth(travel_manager), json={"name": "x", "scopes": ["memory:read"],
                                                                            "project": "work"})
        assert elsewhere.status_code == 403 and elsewhere.json()["error"]["field"] == "project", elsewhere.text
        inherited = h.post("/me/keys", headers=auth(travel_manager), json={"name": "phone", "scopes": ["memory:read"]})
        assert inherited.status_code == 201 and inherited.json()["view"]["project"] == "travel", inherited.text
        seen = {k["name"] for k in h.get("/me/keys", headers=auth(travel_manager)).json()["keys"]}
        assert seen == {"laptop", "travel console", "travel manager", "phone"}, seen
        listed = h.get("/me/keys", headers=auth(manager)).json()["keys"]
        assert {k["user_id"] for k in listed} == {running.user_id}
        assert {"console", "reader", "laptop", "operator"} <= {k["name"] for k in listed}
        assert all("key" not in k and "key_hash" not in k for k in listed), listed  # never a secret

        # bob neither sees nor revokes alice's keys; a restricted key cannot revoke another project's
        bobs = h.get("/me/keys", headers=auth(bob_manager)).json()["keys"]
        assert {k["user_id"] for k in bobs} == {running.other_user_id}, bobs
        laptop_id = laptop["view"]["key_id"]
        assert h.delete(f"/me/keys/{laptop_id}", headers=auth(bob_manager)).status_code == 404
        reader_id = next(k["key_id"] for k in listed if k["name"] == "reader")
        assert h.delete(f"/me/keys/{reader_id}", headers=auth(travel_manager)).status_code == 404
        assert h.get("/whoami", headers=auth(laptop["key"])).status_code == 200  # untouched

        # revoked by its owner: refused at once
        gone = h.delete(f"/me/keys/{laptop_id}", headers=auth(manager))
        assert gone.status_code == 200 and gone.json()["revoked_at"], gone.text
        assert h.get("/whoami", headers=auth(laptop["key"])).status_code == 401
