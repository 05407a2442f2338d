"""Idempotency keys that never lie and never collide (issue 19), over REST against the real stack:
a key means something only within one user and one operation, and the same key with another
request is refused, never answered with the first request's outcome."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

pytestmark = pytest.mark.e2e


def auth(key: str, idem: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}"}
    if idem:
        headers["Idempotency-Key"] = idem
    return headers


def contents(h: httpx.Client, key: str, keyword: str) -> list[str]:
    listed = h.get("/v1/memories", params={"keyword": keyword, "limit": 100}, headers=auth(key))
    assert listed.status_code == 200, listed.text
    return sorted(m["content"] for m in listed.json()["memories"])


def test_a_reused_key_with_another_body_is_refused(running) -> None:  # type: ignore[no-untyped-def]
    run, k = uuid.uuid4().hex[:8], "reuse-" + uuid.uuid4().hex
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        first = h.post("/v1/memories", json={"content": f"first body {run}"}, headers=auth(running.key, k))
        assert first.status_code == 201, first.text
        retry = h.post("/v1/memories", json={"content": f"first body {run}"}, headers=auth(running.key, k))
        assert retry.status_code == 201 and retry.json() == first.json()
        other = h.post("/v1/memories", json={"content": f"a different body {run}"}, headers=auth(running.key, k))
        assert other.status_code == 422, other.text
        error = other.json()["error"]
        assert error["code"] == "idempotency_key_reused" and error["field"] == "idempotency_key"
        assert "save_memory" in error["message"]
        assert contents(h, running.key, run) == [f"first body {run}"]


def test_a_key_reused_on_another_operation_is_its_own_request(running) -> None:  # type: ignore[no-untyped-def]
    run, k = uuid.uuid4().hex[:8], "cross-" + uuid.uuid4().hex
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        saved = h.post("/v1/memories", headers=auth(running.key, k), json={
            "category": "goal", "memory_key": f"goal.run{run}", "content": f"Run 10k {run}"})
        assert saved.status_code == 201, saved.text
        updated = h.post("/v1/memories/update", headers=auth(running.key, k),
                         json={"id": saved.json()["memory_id"], "content": f"Run a marathon {run}"})
        assert updated.status_code == 200, updated.text
        assert updated.json()["version"] == 2 and updated.json()["updated"] is True
        shared = h.post("/v1/shared-memories", headers=auth(running.key, k),
                        json={"title": f"Trip {run}", "event": "Sunset at Nazaré"})
        assert shared.status_code == 200, shared.text
        assert shared.json()["title"] == f"Trip {run}" and shared.json()["created"] is True
        forgot = h.post("/v1/memories/forget", headers=auth(running.key, k), json={"memory_id": saved.json()["memory_id"]})
        assert forgot.status_code == 200 and forgot.json()["forgotten"] is True


def test_two_users_equal_keys_never_meet(running) -> None:  # type: ignore[no-untyped-def]
    run, k = uuid.uuid4().hex[:8], "shared-space-" + uuid.uuid4().hex
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        a = h.post("/v1/memories", json={"content": f"alice's note {run}"}, headers=auth(running.key, k))
        b = h.post("/v1/memories", json={"content": f"bob's note {run}"}, headers=auth(running.other_key, k))
        assert a.status_code == 201 and b.status_code == 201, (a.text, b.text)
        assert a.json()["memory_id"] != b.json()["memory_id"]
        assert contents(h, running.key, run) == [f"alice's note {run}"]
        assert contents(h, running.other_key, run) == [f"bob's note {run}"]


async def test_many_users_share_a_key_space_and_every_write_lands_once(running) -> None:  # type: ignore[no-untyped-def]
    """Concurrent writers: 2 users x 12 keys, each write sent twice at once; every write saved exactly once."""
    run = uuid.uuid4().hex[:8]
    keys = [f"space-{run}-{i:02d}" for i in range(12)]
    users = {"alice": running.key, "bob": running.other_key}
    async with httpx.AsyncClient(base_url=running.base_url, timeout=90) as h:
        async def save(user: str, k: str) -> httpx.Response:
            return await h.post("/v1/memories", json={"content": f"{user} {k} {run}"}, headers=auth(users[user], k))

        replies = await asyncio.gather(*(save(u, k) for u in users for k in keys for _ in range(2)))
    assert all(r.status_code in (201, 409) for r in replies), [r.text for r in replies if r.status_code not in (201, 409)]
    ids = {r.json()["memory_id"] for r in replies if r.status_code == 201}
    assert len(ids) == len(users) * len(keys)
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        for user, key in users.items():
            assert contents(h, key, run) == sorted(f"{user} {k} {run}" for k in keys)


async def test_concurrent_different_bodies_under_one_key_never_both_succeed(running) -> None:  # type: ignore[no-untyped-def]
    run, k = uuid.uuid4().hex[:8], "race-" + uuid.uuid4().hex
    async with httpx.AsyncClient(base_url=running.base_url, timeout=90) as h:
        replies = await asyncio.gather(*(
            h.post("/v1/memories", json={"content": f"body {i} {run}"}, headers=auth(running.key, k)) for i in range(4)
        ))
    codes = sorted(r.status_code for r in replies)
    assert codes.count(201) >= 1 and set(codes) <= {201, 409, 422}, [r.text for r in replies]
    winners = {r.json()["memory_id"] for r in replies if r.status_code == 201}
    assert len(winners) == 1  # a 201 only ever for the request that was saved
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        assert len(contents(h, running.key, run)) == 1
