"""The console's memory list in headless Chromium: the REST API's sort (newest, oldest, importance),
its pages (Load more, through next_cursor), the created date range and the source filter, each
checked against GET /v1/memories. Screenshots as in test_console.py (ENGRAM_SCREENSHOTS_DIR)."""

from __future__ import annotations

import uuid
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_console import ALL_SCOPES, _go
from tests.e2e.test_graph_app import auth, browser, chromium_only, screenshots

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def listed(running) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    run = uuid.uuid4().hex[:6]
    project = f"cl-{run}"
    key = running.stack.create_key(running.user_id, f"console-lists-{run}", ALL_SCOPES)["key"]
    with httpx.Client(base_url=running.base_url, headers=auth(key), timeout=60) as h:
        ids = []
        for i, (text, importance) in enumerate([("Walks the dog at seven", 2), ("Prefers green tea", 4),
                                                 ("Plays chess on Sundays", 3), ("Lives in Lisbon", 5)]):
            saved = h.post("/v1/memories", json={"content": f"{text} ({run} {i})", "project": project,
                                                 "importance": importance})
            assert saved.status_code == 201, saved.text
            ids.append(saved.json()["memory_id"])
        assert h.put(f"/v1/projects/{project}/extraction-mode", json={"mode": "agent"}).status_code == 200
        log = h.post("/v1/daily-logs", json={"log_date": "2025-03-04", "project": project,
                                             "turns": [{"speaker": "user", "text": "I started learning the cello"}]})
        assert log.status_code in (200, 201), log.text
        extracted = h.post("/v1/memories", json={
            "content": f"Learning the cello ({run})", "project": project, "category": "skill",
            "provenance": {"log_id": log.json()["id"], "task_id": f"cl-{run}", "turns": [0]}})
        assert extracted.status_code == 201, extracted.text
        ids.append(extracted.json()["memory_id"])
    return {"key": key, "project": project, "ids": ids}


async def _signed_in_by_key(chromium: Any, running: Any, key: str, height: int = 800) -> tuple[Any, list[str]]:
    """A light window signed in with ``key`` (typed, then Enter), its first view drawn; the page
    errors it will collect."""
    context = await chromium.new_context(viewport={"width": 1200, "height": height}, color_scheme="light")
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    await page.goto(running.base_url + "/console")
    await page.wait_for_selector("#signin:not([hidden])")
    await page.fill("#key", key)
    await page.press("#key", "Enter")
    await page.wait_for_function("() => engramConsole.rendered > 0 && engramConsole.busy === 0")
    return page, errors


async def _rows(page: Any) -> list[str]:
    return await page.eval_on_selector_all("table.memories tbody tr", "rs => rs.map(r => r.dataset.id)")  # type: ignore[no-any-return]


@chromium_only
async def test_sort_pages_dates_and_source(running, listed: dict[str, Any], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    shots = screenshots(tmp_path)
    project, ids = listed["project"], listed["ids"]
    h = httpx.Client(base_url=running.base_url, headers=auth(listed["key"]), timeout=60)
    async with browser() as chromium:
        page, errors = await _signed_in_by_key(chromium, running, listed["key"], height=900)

        # oldest first, two a page: Load more pages on (the REST API's cursor) until everything is shown
        await _go(page, f"#/memories?project={project}&sort=oldest&limit=2")
        assert await _rows(page) == ids[:2]
        assert "more to load" in await page.inner_text("#count")
        for shown in (4, 5):
            await page.click("#load-more")
            await page.wait_for_function(f"() => document.querySelectorAll('table.memories tbody tr').length === {shown}")
        assert await _rows(page) == ids and await page.locator("#load-more").count() == 0
        await _go(page, f"#/memories?project={project}&sort=newest")
        assert await _rows(page) == list(reversed(ids))
        await _go(page, f"#/memories?project={project}&sort=importance")
        by_rest = h.get("/v1/memories", params={"project": project, "sort": "importance"}).json()["memories"]
        assert await _rows(page) == [m["id"] for m in by_rest]

        # the source filter and the date range, set through the form
        await page.select_option("#source-filter", "extracted")
        await page.click("#apply")
        await page.wait_for_function("() => location.hash.includes('source=extracted') && engramConsole.busy === 0")
        await page.wait_for_function("() => document.querySelectorAll('table.memories tbody tr').length === 1")
        assert await _rows(page) == ids[-1:]
        await page.screenshot(path=str(shots / "console-memories-filters.png"), full_page=True)
        await page.select_option("#source-filter", "saved")
        tomorrow = (date.today() + timedelta(days=2)).isoformat()
        await page.fill("#created-from", tomorrow)
        await page.click("#apply")
        await page.wait_for_function("() => location.hash.includes('from=') && engramConsole.busy === 0")
        await page.wait_for_selector("#memory-list .empty")
        yesterday = (date.today() - timedelta(days=2)).isoformat()
        await _go(page, f"#/memories?project={project}&source=saved&from={yesterday}&to={tomorrow}&sort=oldest")
        assert await _rows(page) == ids[:-1]
        assert await page.input_value("#created-from") == yesterday and await page.input_value("#source-filter") == "saved"
        assert not errors, errors
    h.close()


@chromium_only
async def test_bulk_forget_of_the_selected(running, listed: dict[str, Any], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Select rows, give a reason, forget them in one request (POST /v1/memories/forget/bulk)."""
    shots = screenshots(tmp_path)
    run = uuid.uuid4().hex[:6]
    project = f"clf-{run}"
    h = httpx.Client(base_url=running.base_url, headers=auth(listed["key"]), timeout=60)
    ids = [h.post("/v1/memories", json={"content": f"Bulk pick {i} ({run})", "project": project}).json()["memory_id"]
           for i in range(3)]
    async with browser() as chromium:
        page, errors = await _signed_in_by_key(chromium, running, listed["key"])
        await _go(page, f"#/memories?project={project}&sort=oldest")
        for memory_id in ids[:2]:
            await page.check(f"tr[data-id='{memory_id}'] td.pick input")
        await page.fill(".bulk input[type=text]", "no longer true")
        await page.screenshot(path=str(shots / "console-bulk-selected.png"), full_page=True)
        await page.click("#bulk-forget")
        await page.click("#bulk-forget")  # the confirmation
        # the list drawn again, not the moment between (route() shows "Loading…" before it asks for
        # the page: no row then, and nothing in flight yet, which a busy machine made this test see)
        await page.wait_for_function(f"() => !document.querySelector(\"tr[data-id='{ids[0]}']\") && "
                                     f"document.querySelector(\"tr[data-id='{ids[2]}']\") && engramConsole.busy === 0")
        assert await _rows(page) == ids[2:]
        for memory_id in ids[:2]:
            got = h.get(f"/v1/memories/{memory_id}").json()
            assert (got.get("memory") or got)["status"] == "forgotten"
        last = h.get(f"/v1/memories/{ids[0]}/history").json()["versions"][-1]
        assert last["event"] == "MemoryForgotten"
        assert not errors, errors
    h.close()


@chromium_only
async def test_memories_moved_to_another_project(running, listed: dict[str, Any], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two selected rows moved at once, and one from its own page (POST /v1/memories/{id}/move): each
    arrives in the other project (REST lists it there) and the one left behind is forgotten naming it."""
    shots = screenshots(tmp_path)
    run = uuid.uuid4().hex[:6]
    project, target = f"clm-{run}", f"clm-to-{run}"
    h = httpx.Client(base_url=running.base_url, headers=auth(listed["key"]), timeout=60)
    ids = [h.post("/v1/memories", json={"content": f"Moving box {i} ({run})", "project": project}).json()["memory_id"]
           for i in range(3)]
    async with browser() as chromium:
        page, errors = await _signed_in_by_key(chromium, running, listed["key"])
        await _go(page, f"#/memories?project={project}&sort=oldest")
        for memory_id in ids[:2]:
            await page.check(f"tr[data-id='{memory_id}'] td.pick input")
        await page.fill("#bulk-move-to", target)
        await page.screenshot(path=str(shots / "console-bulk-move.png"), full_page=True)
        await page.click("#bulk-move button[type=submit]")
        await page.wait_for_function(f"() => !document.querySelector(\"tr[data-id='{ids[0]}']\") && "
                                     f"document.querySelector(\"tr[data-id='{ids[2]}']\") && engramConsole.busy === 0")
        assert await _rows(page) == ids[2:]
        await _go(page, f"#/memory/{project}/{ids[2]}")
        await page.fill("#move-memory-to", target)
        await page.click("#move-memory button[type=submit]")
        await page.wait_for_function(f"() => location.hash.includes('{target}') && engramConsole.busy === 0")
        moved = h.get("/v1/memories", params={"project": target, "sort": "oldest"}).json()["memories"]
        assert [m["content"] for m in moved] == [f"Moving box {i} ({run})" for i in range(3)], moved
        assert h.get("/v1/memories", params={"project": project}).json()["memories"] == []
        left = h.get(f"/v1/memories/{ids[0]}/history").json()["versions"][-1]
        assert left["status"] == "forgotten" and target in left["forget_reason"], left
        assert not errors, errors
    h.close()


@pytest.fixture
def log_days(running) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    run = uuid.uuid4().hex[:6]
    return {"run": run, "key": running.stack.create_key(running.user_id, f"console-logs-{run}", ALL_SCOPES)["key"]}


@chromium_only
async def test_logs_by_day_and_status_and_a_logs_runs(running, log_days: dict[str, Any], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The logs view lists logs of any status by day range and status (GET /v1/daily-logs), with tries and
    the error; a log's page shows a run that failed before recording a result (GET /v1/extraction-tasks?log_id=)."""
    shots = screenshots(tmp_path)
    run, key = log_days["run"], log_days["key"]
    project = f"cll-{run}"
    h = httpx.Client(base_url=running.base_url, headers=auth(key), timeout=60)
    assert h.put(f"/v1/projects/{project}/extraction-mode", json={"mode": "agent"}).status_code == 200
    ids = {}
    for day in ("2025-06-01", "2025-06-02", "2025-06-03"):
        saved = h.post("/v1/daily-logs", json={"project": project, "log_date": day,
                                               "turns": [{"speaker": "user", "text": f"On {day} I repotted the fern"}]})
        assert saved.status_code in (200, 201), saved.text
        ids[day] = saved.json()["id"]
    failing = ids["2025-06-02"]
    assert h.post(f"/v1/daily-logs/{failing}/claim").json()["claimed"] is True
    assert h.post(f"/v1/daily-logs/{failing}/failed", json={"error_reason": "the model answered no JSON"}).status_code == 200
    assert h.post("/v1/extraction-tasks", json={"task_id": f"cll-{run}", "log_ids": [failing], "status": "failed",
                                                "error": "the model answered no JSON", "project": project}).status_code == 200
    async with browser() as chromium:
        page, errors = await _signed_in_by_key(chromium, running, key)
        await _go(page, f"#/logs?project={project}")
        rows = await page.eval_on_selector_all("#log-list tbody tr", "rs => rs.map(r => r.dataset.id)")
        assert rows == [ids["2025-06-03"], ids["2025-06-02"], ids["2025-06-01"]]
        row = page.locator(f"#log-list tr[data-id='{failing}']")
        assert "the model answered no JSON" in await row.inner_text() and "1" in await row.locator("td.num").inner_text()
        await page.fill("#log-from", "2025-06-02")
        await page.fill("#log-to", "2025-06-02")
        await page.click("#log-apply")
        await page.wait_for_function("() => location.hash.includes('from=2025-06-02') && engramConsole.busy === 0")
        await page.wait_for_function("() => document.querySelectorAll('#log-list tbody tr').length === 1")
        assert f"project={project}" in page.url and await page.input_value("#log-status") == ""
        await page.screenshot(path=str(shots / "console-logs-filtered.png"), full_page=True)
        await _go(page, f"#/logs?project={project}&status=processed")
        assert await page.locator("#log-list").count() == 0 and "No log matches" in await page.inner_text("#view")
        await _go(page, f"#/log/{failing}")
        await page.wait_for_selector(f".run[data-task='cll-{run}']")
        assert "the model answered no JSON" in await page.inner_text(f".run[data-task='cll-{run}']")
        await page.screenshot(path=str(shots / "console-log-runs.png"), full_page=True)
        assert not errors, errors
    h.close()


@pytest.fixture
def user_keys(running) -> dict[str, str]:  # type: ignore[no-untyped-def]
    run = uuid.uuid4().hex[:6]
    return {"admin": running.stack.create_key(running.user_id, f"console-users-{run}", ALL_SCOPES)["key"],
            "worker": running.stack.create_key(running.user_id, f"console-users-w-{run}",
                                               ["memory:read", "memory:write"])["key"]}


@chromium_only
async def test_users_for_an_admin(running, user_keys: dict[str, str], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """An admin key sees the install's users (GET /v1/users) and opens another user's keys; a key
    without admin is told what it lacks."""
    shots = screenshots(tmp_path)
    async with browser() as chromium:
        for key, admin in ((user_keys["admin"], True), (user_keys["worker"], False)):
            page, errors = await _signed_in_by_key(chromium, running, key)
            await _go(page, "#/users")
            if not admin:
                assert await page.locator("#user-list").count() == 0 and "admin scope" in await page.inner_text("#view")
                await page.context.close()
                continue
            shown = await page.eval_on_selector_all("#user-list tbody tr", "rs => rs.map(r => r.dataset.id)")
            with httpx.Client(base_url=running.base_url, headers=auth(key), timeout=60) as h:
                assert set(shown) == {u["user_id"] for u in h.get("/v1/users").json()["users"]}
                bobs = {k["key_id"] for k in h.get("/v1/keys", params={"user_id": running.other_user_id}).json()["keys"]}
            assert running.user_id in shown and running.other_user_id in shown
            assert running.username in await page.inner_text(f"#user-list tr[data-id='{running.user_id}']")
            await page.screenshot(path=str(shots / "console-users.png"), full_page=True)
            before = await page.evaluate("engramConsole.rendered")
            await page.click(f"#user-list tr[data-id='{running.other_user_id}'] a.user-keys")
            await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
            assert running.other_user_id in await page.inner_text("#view h1")
            listed = await page.eval_on_selector_all("#key-list tbody tr", "rs => rs.map(r => r.dataset.id)")
            assert set(listed) == bobs
            assert not errors, errors
            await page.context.close()
