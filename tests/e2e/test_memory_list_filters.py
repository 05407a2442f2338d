"""GET /v1/memories' filters from outside: the created date range, the source (saved or extracted;
imported is refused naming the field), the sort (importance, newest, oldest) and cursor paging that
stays in its sort and inside the caller's project (a restricted key, another user's key)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.e2e


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def every_page(h: httpx.Client, key: str, **params: Any) -> list[dict[str, Any]]:
    """Every memory of a listing, page by page through next_cursor."""
    out: list[dict[str, Any]] = []
    cursor = None
    for _ in range(50):
        page = h.get("/v1/memories", headers=auth(key), params={**params, **({"cursor": cursor} if cursor else {})})
        assert page.status_code == 200, page.text
        body = page.json()
        out += body["memories"]
        cursor = body.get("next_cursor")
        if cursor is None:
            return out
    raise AssertionError("paging did not end")


@pytest.fixture(scope="module")
def listing(running) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    run = uuid.uuid4().hex[:8]
    project, other = f"lf-{run}", f"lfw-{run}"
    admin = running.stack.create_key(running.user_id, f"lf-admin-{run}", ["admin"])["key"]
    worker = running.stack.create_key(running.user_id, f"lf-worker-{run}",
                                      ["memory:read", "memory:write", "memory:maintenance"])["key"]
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        restricted = h.post("/v1/keys", headers=auth(admin), json={
            "user_id": running.user_id, "name": f"lf-restricted-{run}", "scopes": ["memory:read", "memory:write"],
            "project": other})
        assert restricted.status_code == 201, restricted.text
        ids = []
        for i, importance in enumerate([3, 5, 1, 5, 2]):
            saved = h.post("/v1/memories", headers=auth(running.key), json={
                "content": f"list filter {run} fact number {i}", "project": project, "importance": importance})
            assert saved.status_code == 201, saved.text
            ids.append(saved.json()["memory_id"])
        for i in range(3):
            saved = h.post("/v1/memories", headers=auth(running.key), json={
                "content": f"list filter {run} work fact {i}", "project": other})
            assert saved.status_code == 201, saved.text
        mode = h.put(f"/v1/projects/{project}/extraction-mode", headers=auth(worker), json={"mode": "agent"})
        assert mode.status_code == 200, mode.text
        log = h.post("/v1/daily-logs", headers=auth(worker), json={
            "log_date": "2025-02-03", "project": project, "turns": [{"speaker": "user", "text": "I grow tomatoes"}]})
        assert log.status_code in (200, 201), log.text
        extracted = h.post("/v1/memories", headers=auth(worker), json={
            "content": f"list filter {run} grows tomatoes", "project": project,
            "provenance": {"log_id": log.json()["id"], "task_id": "lf-1", "turns": [0]}})
        assert extracted.status_code == 201, extracted.text
        ids.append(extracted.json()["memory_id"])
    return {"project": project, "other": other, "ids": ids, "restricted": restricted.json()["key"]}


def test_sorts_page_through_everything_in_order(running, listing) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        newest = every_page(h, running.key, project=listing["project"], sort="newest", limit=2)
        oldest = every_page(h, running.key, project=listing["project"], sort="oldest", limit=2)
        ranked = every_page(h, running.key, project=listing["project"], limit=2)
        one_page = h.get("/v1/memories", headers=auth(running.key),
                         params={"project": listing["project"], "sort": "oldest", "limit": 100}).json()
    assert [m["id"] for m in oldest] == listing["ids"]
    assert [m["id"] for m in newest] == list(reversed(listing["ids"]))
    assert "next_cursor" not in one_page and [m["id"] for m in one_page["memories"]] == listing["ids"]
    assert sorted(m["id"] for m in ranked) == sorted(listing["ids"])
    assert [m["importance"] for m in ranked] == sorted((m["importance"] for m in ranked), reverse=True)
    assert all(m["project"] == listing["project"] for m in newest + oldest + ranked)


def test_source_and_created_range(running, listing) -> None:  # type: ignore[no-untyped-def]
    ids, project = listing["ids"], listing["project"]
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        def listed(**params: Any) -> list[str]:
            r = h.get("/v1/memories", headers=auth(running.key), params={"project": project, "sort": "oldest", **params})
            assert r.status_code == 200, r.text
            return [m["id"] for m in r.json()["memories"]]

        assert listed(source="extracted") == ids[-1:]
        assert listed(source="saved") == ids[:-1]
        assert listed(source="imported") == []  # (an import's are: tests/e2e/test_portability.py)
        refused = h.get("/v1/memories", headers=auth(running.key), params={"project": project, "source": "restored"})
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "source", refused.text
        assert "imported" in refused.json()["error"]["message"]
        created = [h.get(f"/v1/memories/{i}", headers=auth(running.key)).json()["created_at"] for i in ids]
        assert listed(created_from=created[2]) == ids[2:]
        assert listed(created_to=created[1]) == ids[:2]
        assert listed(created_from=created[1], created_to=created[3]) == ids[1:4]
        day = datetime.fromisoformat(created[0]).date()
        assert listed(created_to=(day - timedelta(days=1)).isoformat()) == []
        assert listed(created_from=day.isoformat(), created_to=day.isoformat())[:1] == ids[:1]
        assert listed(created_from=created[3], created_to=created[1]) == []  # an empty range: nothing
        bad = h.get("/v1/memories", headers=auth(running.key), params={"created_from": "yesterday"})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "created_from", bad.text


def test_cursor_keeps_its_sort_and_refuses_what_it_did_not_give(running, listing) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        first = h.get("/v1/memories", headers=auth(running.key),
                      params={"project": listing["project"], "sort": "newest", "limit": 1}).json()
        cursor = first["next_cursor"]
        for params in ({"sort": "oldest", "cursor": cursor}, {"cursor": cursor}, {"cursor": "bm90LWEtY3Vyc29y"},
                       {"cursor": "x"}, {"cursor": cursor, "sort": "newest", "as_of": "2026-01-01"}):
            r = h.get("/v1/memories", headers=auth(running.key), params={"project": listing["project"], **params})
            assert r.status_code == 409 and r.json()["error"]["field"] == "cursor", (params, r.text)
        assert "sort" in h.get("/v1/memories", headers=auth(running.key),
                               params={"sort": "oldest", "cursor": cursor}).json()["error"]["message"]


def test_paging_stays_inside_the_callers_project(running, listing) -> None:  # type: ignore[no-untyped-def]
    """A restricted key pages its own project only, whatever project it names or cursor it brings;
    another user sees none of the owner's memories."""
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        owner_page = h.get("/v1/memories", headers=auth(running.key),
                           params={"project": listing["project"], "sort": "newest", "limit": 1}).json()
        for key in (listing["restricted"],):
            seen = every_page(h, key, sort="newest", limit=1)
            assert seen and all(m["project"] == listing["other"] for m in seen)
            named = h.get("/v1/memories", headers=auth(key), params={"project": listing["project"], "sort": "newest"})
            assert named.status_code in (200, 403), named.text
            if named.status_code == 200:
                assert all(m["project"] == listing["other"] for m in named.json()["memories"])
            carried = h.get("/v1/memories", headers=auth(key),
                            params={"sort": "newest", "cursor": owner_page["next_cursor"], "limit": 100})
            assert carried.status_code == 200, carried.text
            assert all(m["project"] == listing["other"] for m in carried.json()["memories"])
        stranger = every_page(h, running.other_key, project=listing["project"], sort="oldest", limit=2)
        assert stranger == []
        stranger_all = every_page(h, running.other_key, sort="oldest", limit=100, source="extracted")
        assert not {m["id"] for m in stranger_all} & set(listing["ids"])
