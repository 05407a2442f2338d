"""POST /v1/memories/forget/bulk from outside: up to 100 ids with one reason, answered id by id;
idempotent under retry with an Idempotency-Key; the limit named; a project-restricted key, another
user's key and a read-only key forget nothing they may not."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.e2e


def auth(key: str, idem: str | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **({"Idempotency-Key": idem} if idem else {})}


def save(h: httpx.Client, key: str, content: str, project: str) -> str:
    saved = h.post("/v1/memories", headers=auth(key), json={"content": content, "project": project})
    assert saved.status_code == 201, saved.text
    return saved.json()["memory_id"]  # type: ignore[no-any-return]


def status_of(h: httpx.Client, key: str, memory_id: str) -> str:
    got = h.get(f"/v1/memories/{memory_id}", headers=auth(key))
    assert got.status_code == 200, got.text
    body = got.json()
    return (body.get("memory") or body)["status"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def keys(running) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    run = uuid.uuid4().hex[:6]
    admin = running.stack.create_key(running.user_id, f"bf-admin-{run}", ["admin"])["key"]
    reader = running.stack.create_key(running.user_id, f"bf-reader-{run}", ["memory:read"])["key"]
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        work = h.post("/v1/keys", headers=auth(admin), json={
            "user_id": running.user_id, "name": f"bf-work-{run}", "scopes": ["memory:read", "memory:write"],
            "project": f"bfw-{run}"})
        assert work.status_code == 201, work.text
    return {"run": run, "reader": reader, "work": work.json()["key"], "home": f"bfh-{run}", "other": f"bfw-{run}"}


def test_forgets_each_and_a_retry_forgets_nothing_twice(running, keys) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        ids = [save(h, running.key, f"bulk forget {keys['run']} item {i}", keys["home"]) for i in range(3)]
        missing = str(uuid.uuid4())
        body = {"memory_ids": [*ids, missing], "reason": "cleaning up"}
        idem = f"bf-{keys['run']}-first"
        first = h.post("/v1/memories/forget/bulk", headers=auth(running.key, idem), json=body)
        assert first.status_code == 200, first.text
        answer = first.json()
        assert (answer["forgotten"], answer["already_forgotten"], answer["errors"]) == (3, 0, 1)
        assert [r["index"] for r in answer["results"]] == [0, 1, 2, 3]
        error = answer["results"][3]
        assert error["status"] == "error" and error["error"]["code"] == "not_found"
        assert error["error"]["field"] == "memory_ids[3]"
        assert all(status_of(h, running.key, i) == "forgotten" for i in ids)
        history = h.get(f"/v1/memories/{ids[0]}/history", headers=auth(running.key)).json()["versions"]
        assert history[-1]["status"] == "forgotten" and history[-1]["event"] == "MemoryForgotten"

        again = h.post("/v1/memories/forget/bulk", headers=auth(running.key, idem), json=body)
        assert again.status_code == 200 and again.json() == answer
        assert len(h.get(f"/v1/memories/{ids[0]}/history", headers=auth(running.key)).json()["versions"]) == len(history)

        fresh = h.post("/v1/memories/forget/bulk", headers=auth(running.key), json={"memory_ids": ids})
        assert fresh.status_code == 200 and fresh.json()["already_forgotten"] == 3, fresh.text


def test_limit_and_repeats_are_named(running) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        too_many = h.post("/v1/memories/forget/bulk", headers=auth(running.key),
                          json={"memory_ids": [str(uuid.uuid4()) for _ in range(101)]})
        assert too_many.status_code == 422, too_many.text
        assert too_many.json()["error"]["field"] == "memory_ids" and "100" in too_many.json()["error"]["message"]
        one = str(uuid.uuid4())
        twice = h.post("/v1/memories/forget/bulk", headers=auth(running.key), json={"memory_ids": [one, one]})
        assert twice.status_code == 422 and twice.json()["error"]["field"] == "memory_ids", twice.text
        empty = h.post("/v1/memories/forget/bulk", headers=auth(running.key), json={"memory_ids": []})
        assert empty.status_code == 422 and empty.json()["error"]["field"] == "memory_ids", empty.text


def test_access_rules_hold(running, keys) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        home = save(h, running.key, f"bulk forget {keys['run']} home secret", keys["home"])
        mine = save(h, keys["work"], f"bulk forget {keys['run']} work note", keys["other"])
        restricted = h.post("/v1/memories/forget/bulk", headers=auth(keys["work"]), json={"memory_ids": [home, mine]})
        assert restricted.status_code == 200, restricted.text
        results = restricted.json()["results"]
        assert results[0]["status"] == "error" and results[0]["error"]["code"] == "not_found"
        assert "home secret" not in restricted.text
        assert results[1]["status"] == "forgotten"
        assert status_of(h, running.key, home) == "active"

        stranger = h.post("/v1/memories/forget/bulk", headers=auth(running.other_key), json={"memory_ids": [home]})
        assert stranger.status_code == 200 and stranger.json()["results"][0]["error"]["code"] == "not_found"
        reader = h.post("/v1/memories/forget/bulk", headers=auth(keys["reader"]), json={"memory_ids": [home]})
        assert reader.status_code == 403, reader.text
        assert status_of(h, running.key, home) == "active"
