"""GET /v1/daily-logs (list_daily_logs) and GET /v1/extraction-tasks?log_id= from outside: logs of any
status by day range and status, newest day first, with retry count and error; a log's runs; a
project-restricted key and another user's key see none of the owner's logs or runs."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.e2e

SCOPES = ["memory:read", "memory:write", "memory:maintenance"]


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def logs(running) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    run = uuid.uuid4().hex[:6]
    project, other = f"ll-{run}", f"llw-{run}"
    owner = running.stack.create_key(running.user_id, f"ll-{run}", SCOPES)["key"]
    admin = running.stack.create_key(running.user_id, f"ll-admin-{run}", ["admin"])["key"]
    stranger = running.stack.create_key(running.other_user_id, f"ll-stranger-{run}", SCOPES)["key"]
    with httpx.Client(base_url=running.base_url, timeout=60, headers=auth(owner)) as h:
        restricted = h.post("/v1/keys", headers=auth(admin), json={
            "user_id": running.user_id, "name": f"ll-work-{run}", "scopes": SCOPES, "project": other})
        assert restricted.status_code == 201, restricted.text
        for p in (project, other):
            assert h.put(f"/v1/projects/{p}/extraction-mode", json={"mode": "agent"}).status_code == 200
        ids = {}
        for day in ("2025-01-10", "2025-01-11", "2025-01-12"):
            saved = h.post("/v1/daily-logs", json={"project": project, "log_date": day,
                                                   "turns": [{"speaker": "user", "text": f"day {day} {run}"}]})
            assert saved.status_code in (200, 201), saved.text
            ids[day] = saved.json()["id"]
        work = h.post("/v1/daily-logs", json={"project": other, "log_date": "2025-01-11",
                                              "turns": [{"speaker": "user", "text": f"work {run}"}]})
        assert work.status_code in (200, 201), work.text
        failing = ids["2025-01-11"]
        assert h.post(f"/v1/daily-logs/{failing}/claim").json()["claimed"] is True
        assert h.post(f"/v1/daily-logs/{failing}/failed", json={"error_reason": "the model timed out"}).status_code == 200
        task = h.post("/v1/extraction-tasks", json={"task_id": f"ll-{run}", "log_ids": [failing], "status": "failed",
                                                    "error": "the model timed out", "project": project})
        assert task.status_code == 200, task.text
        other_task = h.post("/v1/extraction-tasks", json={"task_id": f"ll-other-{run}", "log_ids": [ids["2025-01-10"]],
                                                          "status": "success", "project": project})
        assert other_task.status_code == 200, other_task.text
        done = ids["2025-01-12"]
        assert h.post(f"/v1/daily-logs/{done}/claim").json()["claimed"] is True
        assert h.post(f"/v1/daily-logs/{done}/processed").status_code == 200
    return {"run": run, "project": project, "other": other, "ids": ids, "owner": owner, "work": work.json()["id"],
            "restricted": restricted.json()["key"], "stranger": stranger}


def test_logs_by_day_and_status_with_retries_and_errors(running, logs) -> None:  # type: ignore[no-untyped-def]
    ids = logs["ids"]
    with httpx.Client(base_url=running.base_url, timeout=60, headers=auth(logs["owner"])) as h:
        def listed(**params: Any) -> list[dict[str, Any]]:
            r = h.get("/v1/daily-logs", params={"project": logs["project"], **params})
            assert r.status_code == 200, r.text
            return r.json()["logs"]  # type: ignore[no-any-return]

        every = listed()
        assert [g["id"] for g in every] == [ids["2025-01-12"], ids["2025-01-11"], ids["2025-01-10"]]
        by_id = {g["id"]: g for g in every}
        assert by_id[ids["2025-01-12"]]["processing_status"] == "processed"
        pending = by_id[ids["2025-01-11"]]
        assert pending["retry_count"] == 1 and pending["error_reason"] == "the model timed out"
        assert [g["id"] for g in listed(status="processed")] == [ids["2025-01-12"]]
        assert [g["id"] for g in listed(date_from="2025-01-11", date_to="2025-01-11")] == [ids["2025-01-11"]]
        assert [g["id"] for g in listed(date_to="2025-01-11", limit=1)] == [ids["2025-01-11"]]
        assert listed(date_from="2025-01-13") == []
        bad = h.get("/v1/daily-logs", params={"status": "done"})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "status", bad.text

        tasks = h.get("/v1/extraction-tasks", params={"log_id": ids["2025-01-11"]}).json()["tasks"]
        assert [t["task_id"] for t in tasks] == [f"ll-{logs['run']}"] and tasks[0]["error"] == "the model timed out"
        assert h.get("/v1/extraction-tasks", params={"log_id": str(uuid.uuid4())}).json()["tasks"] == []


def test_logs_page_on_by_cursor_without_skipping_or_repeating(running, logs) -> None:  # type: ignore[no-untyped-def]
    """One log a page: every log once, newest day first, while a log's status moves between pages;
    a cursor of another listing, or a forged one, is refused naming cursor."""
    ids = logs["ids"]
    with httpx.Client(base_url=running.base_url, timeout=60, headers=auth(logs["owner"])) as h:
        def page(**params: Any) -> dict[str, Any]:
            r = h.get("/v1/daily-logs", params={"project": logs["project"], "limit": 1, **params})
            assert r.status_code == 200, r.text
            return r.json()  # type: ignore[no-any-return]

        first = page()
        assert [g["id"] for g in first["logs"]] == [ids["2025-01-12"]] and first["next_cursor"]
        moved = h.post(f"/v1/daily-logs/{ids['2025-01-10']}/status", json={"processing_status": "pending"})
        assert moved.status_code == 200, moved.text  # (its updated_at moves: the order does not)
        second = page(cursor=first["next_cursor"])
        third = page(cursor=second["next_cursor"])
        assert [g["id"] for g in second["logs"] + third["logs"]] == [ids["2025-01-11"], ids["2025-01-10"]]
        assert "next_cursor" not in third
        together = h.get("/v1/daily-logs", params={"project": logs["project"], "limit": 2}).json()
        assert [g["id"] for g in together["logs"]] == [ids["2025-01-12"], ids["2025-01-11"]]
        memories = h.get("/v1/memories", params={"limit": 1, "sort": "newest"}).json().get("next_cursor")
        for wrong in ([memories] if memories else []) + ["bm90LWEtY3Vyc29y", "!!"]:
            refused = h.get("/v1/daily-logs", params={"cursor": wrong})
            assert refused.status_code in (409, 422) and refused.json()["error"]["field"] == "cursor", refused.text
    with httpx.Client(base_url=running.base_url, timeout=60, headers=auth(logs["restricted"])) as h:
        # the owner's cursor in a restricted key's hands pages through its own project only
        other = h.get("/v1/daily-logs", params={"cursor": first["next_cursor"]})
        assert other.status_code == 200 and all(g["project"] == logs["other"] for g in other.json()["logs"]), other.text


def test_a_restricted_key_and_another_user_see_none_of_it(running, logs) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        mine = h.get("/v1/daily-logs", headers=auth(logs["restricted"]))
        assert mine.status_code == 200 and [g["id"] for g in mine.json()["logs"]] == [logs["work"]], mine.text
        named = h.get("/v1/daily-logs", headers=auth(logs["restricted"]), params={"project": logs["project"]})
        assert named.status_code in (200, 403), named.text
        if named.status_code == 200:
            assert all(g["project"] == logs["other"] for g in named.json()["logs"])
        tasks = h.get("/v1/extraction-tasks", headers=auth(logs["restricted"]),
                      params={"log_id": logs["ids"]["2025-01-11"]})
        assert tasks.status_code == 200 and tasks.json()["tasks"] == [], tasks.text
        stranger = h.get("/v1/daily-logs", headers=auth(logs["stranger"]), params={"project": logs["project"]})
        assert stranger.status_code == 200 and stranger.json()["logs"] == [], stranger.text
        runs = h.get("/v1/extraction-tasks", headers=auth(logs["stranger"]), params={"log_id": logs["ids"]["2025-01-11"]})
        assert runs.status_code == 200 and runs.json()["tasks"] == []
        reader = running.stack.create_key(running.user_id, f"ll-reader-{logs['run']}", ["memory:read"])["key"]
        assert h.get("/v1/daily-logs", headers=auth(reader)).status_code == 403


async def test_the_mcp_tools_answer_the_same(running, logs) -> None:  # type: ignore[no-untyped-def]
    """list_daily_logs and get_extraction_tasks(log_id) over MCP (the maintenance toolset), and
    recall_memory's sort and cursor: the REST answers, inside a restricted key's project too."""
    from tests.e2e.test_daily_log_tools import call, session

    headers = {**auth(logs["owner"]), "X-Engram-Toolsets": "maintenance"}
    async with session(running.mcp_url, headers) as client:
        listed = await call(client, "list_daily_logs", containerTag=logs["project"], date_to="2025-01-11")
        assert [g["id"] for g in listed["logs"]] == [logs["ids"]["2025-01-11"], logs["ids"]["2025-01-10"]]
        tasks = await call(client, "get_extraction_tasks", log_id=logs["ids"]["2025-01-11"])
        assert [t["task_id"] for t in tasks["tasks"]] == [f"ll-{logs['run']}"]
        refused = await client.call_tool("list_daily_logs", {"date_from": 0})
        assert refused.is_error and "date_from" in str(refused.content)
    async with session(running.mcp_url, {**auth(logs["restricted"]), "X-Engram-Toolsets": "maintenance"}) as client:
        mine = await call(client, "list_daily_logs")
        assert [g["id"] for g in mine["logs"]] == [logs["work"]]
        first = await call(client, "recall_memory", sort="newest", limit=1)
        assert all(m["project"] == logs["other"] for m in first["memories"])
