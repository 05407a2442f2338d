"""The web console /console in headless Chromium (Debian's `chromium` through playwright; nothing
downloaded), against a running stack, every step checked through the REST API as well:

- the page and its two files: a strict CSP (scripts and styles from this origin only, no inline
  script or style anywhere), nothing loaded from elsewhere, no-store, GET only;
- signed in with a pasted key (a wrong one refused), the token in the tab's sessionStorage only and
  never in a URL: the list, a project filter, a search (recall), a memory's page, an edit (version 2
  in its history, a diff between versions), forgetting with a reason, a hostile memory's text shown
  as text (no element, no script run), a failed daily log re-queued, its turns and provenance, a key
  created (shown once, restricted as asked) and revoked, a revoked sign-in sent back to the form;
  every view in a narrow window (no sideways scrolling) and in the dark theme;
- signed in with OAuth: authorization code + PKCE as a public client of the auth service, the code
  gone from the address bar, a token without the admin scope: the keys view manages the user's own
  keys (keys:manage), at most the token's scopes.

Screenshots go to ENGRAM_SCREENSHOTS_DIR when set, else to the test's temporary folder.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_graph_app import TURNS, auth, browser, chromium_only, screenshots

pytestmark = pytest.mark.e2e

HOSTILE = 'Likes <img src=x onerror="window.pwned=1"> and <script>window.pwned=2</script> tea'
ALL_SCOPES = ["memory:read", "memory:write", "memory:maintenance", "admin"]


@dataclass
class ConsoleData:
    project: str
    quiet: str
    admin_key: str
    tea_id: str
    cat_id: str
    hostile_id: str
    failed_log_id: str
    extracted_id: str  # a memory the extractor took from a daily log


def rest(running: Any, key: str) -> httpx.Client:
    return httpx.Client(base_url=running.base_url, headers=auth(key), timeout=60)


@pytest.fixture(scope="module")
def console_data(running) -> ConsoleData:  # type: ignore[no-untyped-def]
    run = uuid.uuid4().hex[:6]
    project, quiet = f"home-{run}", f"quiet-{run}"
    admin_key = running.stack.create_key(running.user_id, f"console-{run}", ALL_SCOPES)["key"]
    with rest(running, admin_key) as h:
        ids = {}
        for name, content in (("tea", "Prefers green tea in the morning"), ("cat", "Has a cat named Miso"),
                              ("porto", "Grew up in Porto"), ("hostile", HOSTILE)):
            saved = h.post("/v1/memories", json={"content": content, "project": project, "category": "preference"})
            assert saved.status_code == 201, saved.text
            ids[name] = saved.json()["memory_id"]
        # a log nobody extracts (agent mode), claimed and failed: the console re-queues it
        assert h.put(f"/v1/projects/{quiet}/extraction-mode", json={"mode": "agent"}).status_code == 200
        log = h.post("/v1/daily-logs", json={"project": quiet, "log_date": "2026-11-30",
                                             "turns": [{"speaker": "user", "text": "I started pottery classes."}]})
        assert log.status_code == 200, log.text
        log_id = log.json()["id"]
        assert h.post(f"/v1/daily-logs/{log_id}/claim").json()["claimed"] is True
        failed = h.post(f"/v1/daily-logs/{log_id}/status", json={"processing_status": "failed", "error_reason": "model timed out"})
        assert failed.status_code == 200 and failed.json()["log"]["processing_status"] == "failed", failed.text
        # a log the engine extracts: memories with provenance (bounded wait, nothing timed)
        day = h.post("/v1/daily-logs", json={"project": project, "log_date": "2025-05-03", "turns": TURNS})
        assert day.status_code == 200, day.text
        extracted: list[dict[str, Any]] = []
        for _ in range(600):
            if h.get(f"/v1/daily-logs/{day.json()['id']}").json()["log"]["processing_status"] == "processed":
                memories = h.get("/v1/memories", params={"project": project, "limit": 100}).json()["memories"]
                extracted = [m for m in memories if m.get("provenance") and m["provenance"].get("turns")]
                break
            time.sleep(0.2)
        assert extracted, "the daily log gave no memory with provenance"
    return ConsoleData(project, quiet, admin_key, ids["tea"], ids["cat"], ids["hostile"], log_id, extracted[0]["id"])


def test_the_page_and_its_files_carry_a_strict_policy(running) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        page = h.get("/console")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        csp = page.headers["content-security-policy"]
        assert "script-src 'self';" in csp and "style-src 'self';" in csp and "unsafe-inline" not in csp
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "form-action 'none'" in csp
        assert page.headers["cache-control"] == "no-store" and page.headers["x-content-type-options"] == "nosniff"
        html = page.text
        assert re.findall(r"<script\b[^>]*>", html) == ['<script src="/console/console.js" defer>']
        assert "<style" not in html and not re.search(r"\s(?:style|on[a-z]+)\s*=", html), "no inline style or handler"
        assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html), "the page loads nothing from elsewhere"
        script = h.get("/console/console.js")
        style = h.get("/console/console.css")
        assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
        assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")
        assert not re.search(r"\.(?:innerHTML|outerHTML)\s*=|insertAdjacentHTML|document\.write|\beval\(|new Function", script.text)
        assert "http://" not in script.text and "https://" not in script.text
        assert "@import" not in style.text and "url(http" not in style.text
        assert h.get("/console/").status_code == 200
        assert h.post("/console").status_code == 405
        assert h.get("/console/other.js").status_code == 404
        assert 'href="/console"' in h.get("/graph").text  # the graph page links here
        for path in ("/console", "/console/console.js"):  # DNS rebinding: another Host is refused
            assert h.get(path, headers={"Host": "evil.example"}).status_code == 421


async def _rendered(page: Any) -> int:
    return int(await page.evaluate("engramConsole.rendered"))


async def _forget_on_its_page(page: Any, hash_: str, reason: str) -> None:
    """Forget a memory on its page, with a reason (the button asks once more)."""
    await _go(page, hash_)
    await page.fill("#forget input", reason)
    await page.click("#forget button[type=submit]")
    await page.wait_for_selector("#forget button[data-confirm='1']")
    before = await _rendered(page)
    await page.click("#forget button[type=submit]")
    await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")


async def _go(page: Any, hash_: str) -> None:
    """Open a view by its address and wait until it has drawn."""
    before = await _rendered(page)
    await page.evaluate("(h) => { location.hash = h; }", hash_)
    await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")


async def _fits(page: Any) -> None:
    """Nothing scrolls sideways in a narrow window."""
    assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


@chromium_only
async def test_signed_in_with_a_key_every_view_works(running, console_data: ConsoleData, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    shots = screenshots(tmp_path)
    d = console_data
    h = rest(running, d.admin_key)
    async with browser() as chromium:
        context = await chromium.new_context(viewport={"width": 1200, "height": 800}, color_scheme="light")
        page = await context.new_page()
        errors: list[str] = []
        dialogs: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), asyncio.ensure_future(dialog.dismiss())))
        await page.goto(running.base_url + "/console")
        await page.wait_for_selector("#signin:not([hidden])")
        await page.screenshot(path=str(shots / "console-sign-in.png"))

        # a wrong key is refused; the right one signs in, kept in this tab only, never in the URL
        await page.fill("#key", "egm_not-a-real-key")
        await page.click("#signin-go")
        await page.wait_for_function("() => document.getElementById('signin-error').textContent.includes('refused')")
        await page.fill("#key", d.admin_key)
        await page.press("#key", "Enter")
        await page.wait_for_selector("table.memories")
        assert d.admin_key not in page.url
        assert await page.evaluate("sessionStorage.getItem('engram.console.token')") == d.admin_key
        assert d.admin_key not in await page.evaluate("JSON.stringify(Object.assign({}, localStorage))")

        # the list, narrowed to one project; the hostile memory's text is text
        await _go(page, f"#/memories?project={d.project}")
        rows = await page.eval_on_selector_all("table.memories tbody tr", "rs => rs.map(r => r.dataset.id)")
        listed = h.get("/v1/memories", params={"project": d.project, "limit": 100}).json()["memories"]
        assert set(rows) == {m["id"] for m in listed} and d.hostile_id in rows
        hostile = await page.inner_text(f"tr[data-id='{d.hostile_id}'] td.content a")
        assert hostile == HOSTILE
        assert await page.evaluate("document.querySelectorAll('#view img, #view script').length") == 0
        assert await page.evaluate("window.pwned === undefined") and not dialogs
        await page.screenshot(path=str(shots / "console-memories.png"), full_page=True)

        # search (POST /v1/recall): the best hit first
        await page.fill("input[type=search] >> nth=0", "green tea in the morning")
        before = await _rendered(page)
        await page.click("form[role=search] button[type=submit]")
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        first = await page.eval_on_selector("table.memories tbody tr", "r => r.dataset.id")
        assert first == d.tea_id
        assert "q=green" in page.url and d.admin_key not in page.url

        # a memory's page; edit -> version 2, seen in the page and in REST
        before = await _rendered(page)
        await page.click(f"tr[data-id='{d.tea_id}'] td.content a")
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        assert await page.inner_text("#memory-content") == "Prefers green tea in the morning"
        assert await page.locator("#versions .version").count() == 1
        await page.fill("#edit textarea", "Prefers oolong tea in the morning, no sugar")
        before = await _rendered(page)
        await page.click("#edit button[type=submit]")
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        await page.wait_for_selector("#versions .version >> nth=1")
        assert await page.locator("#versions .version").count() == 2
        assert await page.inner_text("#memory-content") == "Prefers oolong tea in the morning, no sugar"
        assert "oolong" in await page.inner_text("#diff ins")
        assert "green" in await page.inner_text("#diff del")
        versions = h.get(f"/v1/memories/{d.tea_id}/history").json()["versions"]
        assert [v["version"] for v in versions][-1] == 2 and versions[-1]["content"] == "Prefers oolong tea in the morning, no sugar"
        await page.screenshot(path=str(shots / "console-memory.png"), full_page=True)

        # the hostile memory's own page: its text in the page, as text, in the edit box too
        await _go(page, f"#/memory/{d.project}/{d.hostile_id}")
        assert await page.inner_text("#memory-content") == HOSTILE and await page.input_value("#edit textarea") == HOSTILE
        assert await page.evaluate("document.querySelectorAll('#view img, #view script').length") == 0
        assert await page.evaluate("window.pwned === undefined") and not dialogs

        # forget it, with a reason (the button asks once more)
        await _forget_on_its_page(page, f"#/memory/{d.project}/{d.cat_id}", "the cat moved out")
        assert "forgotten" in (await page.inner_text("#view h1")).lower()
        last = h.get(f"/v1/memories/{d.cat_id}/history").json()["versions"][-1]
        assert last["status"] == "forgotten" and last["forget_reason"] == "the cat moved out"
        assert d.cat_id not in {m["id"] for m in h.get("/v1/memories", params={"project": d.project}).json()["memories"]}
        assert await page.locator("#edit").count() == 0  # a forgotten memory offers no edit

        # provenance: an extracted memory links to its log, the very turns marked, the run's memories named
        provenance = h.get(f"/v1/memories/{d.extracted_id}/history").json()["versions"][-1]["provenance"]
        await _go(page, f"#/memory/{d.project}/{d.extracted_id}")
        assert "2025-05-03" in await page.inner_text("#provenance-link")
        before = await _rendered(page)
        await page.click("#provenance-link")
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        assert provenance["log_id"] in page.url
        marked = await page.eval_on_selector_all("#turns li.marked", "ls => ls.map(l => Number(l.dataset.index))")
        assert marked == sorted(provenance["turns"])
        content = h.get(f"/v1/memories/{d.extracted_id}/history").json()["versions"][-1]["content"]
        assert content in await page.inner_text(f".produced li[data-id='{d.extracted_id}']")
        await page.screenshot(path=str(shots / "console-log.png"), full_page=True)

        # logs: the failed one, its error and tries; re-queued -> pending (REST)
        await _go(page, f"#/logs?project={d.quiet}")
        row = page.locator(f"#log-list tr[data-id='{d.failed_log_id}']")
        assert "model timed out" in await row.inner_text() and await row.get_attribute("data-status") == "failed"
        assert (await page.input_value(f"select[aria-label='Extraction mode of {d.quiet}']")) == "agent"
        await page.screenshot(path=str(shots / "console-logs.png"), full_page=True)
        before = await _rendered(page)
        await row.locator("button.requeue").click()
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        log = h.get(f"/v1/daily-logs/{d.failed_log_id}").json()["log"]
        assert log["processing_status"] == "pending"
        assert await page.locator(f"#log-list tr[data-id='{d.failed_log_id}'][data-status='pending']").count() == 1
        await _go(page, f"#/log/{d.failed_log_id}?turns=0")
        assert "I started pottery classes." in await page.inner_text("#turns li.marked")
        assert "pending" in await page.inner_text("#log-facts")

        # projects with counts, as REST counts them
        await _go(page, "#/projects")
        counts = {p["project"]: p["memories"] for p in h.get("/v1/projects").json()["projects"]}
        shown = await page.inner_text("#project-list")
        assert d.project in shown and str(counts[d.project]) in shown

        # keys: create one restricted to the project (shown once), it works; revoke it, it is refused
        await _go(page, "#/keys")
        await page.fill("#create-key input[type=text] >> nth=0", "laptop")
        await page.uncheck("#create-key input[value='memory:write']")
        await page.fill("#create-key input[list=project-names]", d.project)
        before = await _rendered(page)
        await page.click("#create-key button[type=submit]")
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        secret = await page.input_value("#new-key-secret")
        assert secret.startswith("egm_")
        await page.screenshot(path=str(shots / "console-keys.png"), full_page=True)
        who = httpx.get(running.base_url + "/v1/whoami", headers=auth(secret), timeout=60).json()
        assert who["scopes"] == ["memory:read"] and who["project"] == d.project and who["user_id"] == running.user_id
        key_id = who["key_id"]
        revoke = page.locator(f"#key-list tr[data-id='{key_id}'] button.revoke")
        await revoke.click()
        await page.wait_for_selector(f"#key-list tr[data-id='{key_id}'] button.revoke[data-confirm='1']")
        before = await _rendered(page)
        await revoke.click()
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        assert httpx.get(running.base_url + "/v1/whoami", headers=auth(secret), timeout=60).status_code == 401
        assert await page.locator(f"#key-list tr.revoked[data-id='{key_id}']").count() == 1
        assert secret not in await page.content()  # shown once: gone after the list redrew

        # export with progress
        await _go(page, "#/transfer")
        async with page.expect_download() as download:
            await page.click("form[aria-labelledby=export-title] button[type=submit]")
        await page.wait_for_function("() => document.getElementById('export-out').textContent.startsWith('Done')")
        exported = Path(await (await download.value).path()).read_text(encoding="utf-8").splitlines()
        assert '"type":"header"' in exported[0].replace(" ", "") and any(d.tea_id in line for line in exported)
        # import: plain memory lines and an export's records, in batches, with progress; again: nothing twice
        lines = [{"content": "Plays the cello on Sundays", "category": "skill"}, {"type": "header", "format": "engram-export"},
                 next(json.loads(line) for line in exported if d.hostile_id in line and '"type":"memory"' in line.replace(" ", ""))]
        upload = {"name": "memories.jsonl", "mimeType": "application/x-ndjson",
                  "buffer": "\n".join(json.dumps(line) for line in lines).encode()}
        for expected in ("1 saved, 1 already there", "0 saved, 2 already there"):
            await page.set_input_files("form[aria-labelledby=import-title] input[type=file]", upload)
            await page.select_option("form[aria-labelledby=import-title] select", d.project)
            await page.eval_on_selector("#import-out", "e => e.replaceChildren()")
            await page.click("form[aria-labelledby=import-title] button[type=submit]")
            await page.wait_for_function("() => document.getElementById('import-out').textContent.startsWith('Done')")
            assert expected in await page.inner_text("#import-out")
        assert "1 record left out" in await page.inner_text("#import-out")
        listed = h.get("/v1/memories", params={"project": d.project, "keyword": "cello"}).json()["memories"]
        assert [m["source"] for m in listed] == ["import"]
        await page.screenshot(path=str(shots / "console-transfer.png"), full_page=True)

        # a narrow window in the dark theme: every view fits
        await page.set_viewport_size({"width": 390, "height": 820})
        await page.click("#theme")
        assert await page.evaluate("document.documentElement.dataset.theme") == "dark"
        for name, hash_ in (("memories", f"#/memories?project={d.project}"), ("memory", f"#/memory/{d.project}/{d.tea_id}"),
                            ("logs", "#/logs"), ("keys", "#/keys"), ("projects", "#/projects"), ("transfer", "#/transfer")):
            await _go(page, hash_)
            await _fits(page)
            await page.screenshot(path=str(shots / f"console-{name}-narrow-dark.png"), full_page=True)
        # keyboard and screen readers: a view's heading takes the focus when it opens
        assert await page.evaluate("document.activeElement.tagName") == "H1"

        # signing out forgets the token
        await page.click("#signout")
        await page.wait_for_selector("#signin:not([hidden])")
        assert await page.evaluate("sessionStorage.getItem('engram.console.token')") is None
        assert not errors, errors
        await context.close()

        # a credential revoked while signed in: the next request sends the page back to the form
        made = h.post("/v1/keys", json={"user_id": running.user_id, "name": "short-lived", "scopes": ["memory:read"],
                                        "project": d.project})
        assert made.status_code == 201, made.text
        context = await chromium.new_context(viewport={"width": 1000, "height": 700})
        page = await context.new_page()
        await page.goto(running.base_url + "/console")
        await page.fill("#key", made.json()["key"])
        await page.click("#signin-go")
        await page.wait_for_selector("table.memories")
        # a key restricted to one project: only that project offered, only its memories listed; no writes offered
        assert await page.eval_on_selector("form[aria-label='Filter memories'] select", "s => [...s.options].map(o => o.value)") == [d.project]
        projects = await page.eval_on_selector_all("table.memories tbody td[data-label=Project]", "ts => ts.map(t => t.textContent)")
        assert projects and set(projects) == {d.project}
        assert await page.locator("#bulk-forget").count() == 0
        await _go(page, f"#/memory/{d.project}/{d.tea_id}")
        assert await page.locator("#edit").count() == 0 and "memory:write scope" in await page.inner_text("#view")
        assert h.delete(f"/v1/keys/{made.json()['view']['key_id']}").status_code == 200
        await page.evaluate("location.hash = '#/projects'")
        await page.wait_for_selector("#signin:not([hidden])")
        assert "revoked" in await page.inner_text("#signin-error")
        await context.close()
    h.close()


@chromium_only
async def test_signed_in_with_oauth(running, console_data: ConsoleData, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    shots = screenshots(tmp_path)
    async with browser() as chromium:
        context = await chromium.new_context(viewport={"width": 1100, "height": 760}, color_scheme="dark")
        page = await context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        await page.goto(running.base_url + "/console#/projects")
        await page.wait_for_selector("#signin:not([hidden])")
        asked: list[str] = []
        page.on("request", lambda req: asked.append(req.url) if req.url.startswith(running.auth_url + "/authorize") else None)
        await page.click("#oauth-go")
        await page.wait_for_selector("#username", timeout=60_000)
        query = dict(httpx.URL(asked[0]).params)
        assert query["code_challenge_method"] == "S256" and query["redirect_uri"] == running.base_url + "/console"
        assert set(query["scope"].split()) == {"memory:read", "memory:write", "memory:maintenance", "keys:manage"}
        await page.fill("#username", running.username)
        await page.fill("#password", running.password)
        await page.click("button[type=submit]")
        await page.wait_for_selector("button[value=approve]", timeout=60_000)
        await page.click("button[value=approve]")
        await page.wait_for_url(lambda url: url.startswith(running.base_url + "/console"), timeout=60_000)
        await page.wait_for_selector("#project-list", timeout=60_000)   # back where the sign-in started
        assert "code=" not in page.url and "state=" not in page.url
        token = await page.evaluate("sessionStorage.getItem('engram.console.token')")
        assert token and token != running.key
        who = httpx.get(running.base_url + "/v1/whoami", headers=auth(token), timeout=60).json()
        assert who["user_id"] == running.user_id and "memory:write" in who["scopes"] and "admin" not in who["scopes"]
        assert console_data.project in await page.inner_text("#project-list")
        # no admin scope: the user's own keys (keys:manage, /v1/me/keys), at most the token's scopes
        await _go(page, "#/keys")
        offered = await page.eval_on_selector_all("#create-key input[type=checkbox]", "bs => bs.map(b => b.value)")
        assert offered == ["memory:read", "memory:write", "memory:maintenance"], offered
        await page.fill("#create-key input[type=text] >> nth=0", "phone")
        await page.uncheck("#create-key input[value='memory:write']")
        before = await _rendered(page)
        await page.click("#create-key button[type=submit]")
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        secret = await page.input_value("#new-key-secret")
        phone = httpx.get(running.base_url + "/v1/whoami", headers=auth(secret), timeout=60).json()
        assert (phone["user_id"], phone["scopes"]) == (running.user_id, ["memory:read"]), phone
        await page.screenshot(path=str(shots / "console-oauth-dark.png"), full_page=True)
        revoke = page.locator(f"#key-list tr[data-id='{phone['key_id']}'] button.revoke")
        await revoke.click()
        await page.wait_for_selector(f"#key-list tr[data-id='{phone['key_id']}'] button.revoke[data-confirm='1']")
        before = await _rendered(page)
        await revoke.click()
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        assert httpx.get(running.base_url + "/v1/whoami", headers=auth(secret), timeout=60).status_code == 401
        await page.click("#signout")
        await page.wait_for_selector("#signin:not([hidden])")
        assert await page.evaluate("sessionStorage.getItem('engram.console.token')") is None
        assert not errors, errors
        await context.close()


async def _signed_in(chromium: Any, running: Any, key: str, **options: Any) -> tuple[Any, Any, list[str]]:
    context = await chromium.new_context(**{"viewport": {"width": 1200, "height": 800}, "color_scheme": "light", **options})
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    await page.goto(running.base_url + "/console")
    await page.fill("#key", key)
    await page.click("#signin-go")
    await page.wait_for_selector("table.memories, #memory-list .empty")
    return context, page, errors


def _memory(h: httpx.Client, memory_id: str) -> dict[str, Any]:
    got = h.get(f"/v1/memories/{memory_id}")
    assert got.status_code == 200, got.text
    body = got.json()
    return body.get("memory") or body  # type: ignore[no-any-return]


@pytest.fixture
def truth_key(running) -> str:  # type: ignore[no-untyped-def]
    return str(running.stack.create_key(running.user_id, f"console-truth-{uuid.uuid4().hex[:6]}", ALL_SCOPES)["key"])


@chromium_only
async def test_conflicts_settled_and_memories_pinned(running, truth_key: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The truth features: a flagged pair settled in the Conflicts view (Rex superseded by Bruno, checked through
    REST, marked on its page with the memory that replaced it); a memory pinned and given an expiry on its page."""
    shots = screenshots(tmp_path)
    project = f"pets-{uuid.uuid4().hex[:6]}"
    key = truth_key
    h = rest(running, key)
    rex = h.post("/v1/memories", json={"content": "My dog is called Rex", "project": project})
    assert rex.status_code == 201, rex.text
    bruno = h.post("/v1/memories", json={"content": "My dog is called Bruno", "project": project})
    assert bruno.status_code == 201, bruno.text
    rex_id, bruno_id = rex.json()["memory_id"], bruno.json()["memory_id"]
    assert rex_id in bruno.json()["flagged"], bruno.json()   # the rules cannot tell: another dog, or renamed?
    listed = h.get("/v1/memories/conflicts", params={"project": project}).json()["conflicts"]
    assert [(c["memory"]["id"], c["other"]["id"]) for c in listed] == [(bruno_id, rex_id)]
    async with browser() as chromium:
        context, page, errors = await _signed_in(chromium, running, key)

        # the Conflicts view: the pair side by side, its reason and confidence; "Keep this one" keeps Bruno
        await _go(page, f"#/conflicts?project={project}")
        pair = page.locator(f"#conflict-list li.conflict[data-memory='{bruno_id}'][data-other='{rex_id}']")
        assert await pair.count() == 1
        text = await pair.inner_text()
        assert "My dog is called Bruno" in text and "My dog is called Rex" in text
        assert listed[0]["reason"] in text and f"confidence {round(listed[0]['confidence'] * 100)}%" in text
        await page.screenshot(path=str(shots / "console-conflicts.png"), full_page=True)
        before = await _rendered(page)
        await pair.locator("button.keep-memory").focus()
        await page.keyboard.press("Enter")   # a real button: the keyboard settles it too
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        assert "Settled" in await page.inner_text("#conflict-out")
        assert await page.locator("#no-conflicts").count() == 1
        old = _memory(h, rex_id)
        assert old["status"] == "superseded" and old["superseded_by"]["memory_id"] == bruno_id, old
        assert old["superseded_by"]["decided_by"] != "rules"
        assert _memory(h, bruno_id)["status"] == "active"
        assert h.get("/v1/memories/conflicts", params={"project": project}).json()["conflicts"] == []

        # Rex's page: superseded, replaced by Bruno (linked), with the reason; Bruno's page names what it replaced
        await _go(page, f"#/memory/{project}/{rex_id}")
        assert "superseded" in (await page.inner_text("#view h1")).lower()
        assert await page.locator("#truth-badges .badge.superseded").count() == 1
        link = page.locator("#replaced-by-link")
        assert "My dog is called Bruno" in await link.inner_text() and bruno_id in (await link.get_attribute("href") or "")
        assert old["superseded_by"]["reason"] in await page.inner_text("#replaced-by")
        await page.screenshot(path=str(shots / "console-memory-superseded.png"), full_page=True)
        before = await _rendered(page)
        await link.click()
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        assert "My dog is called Rex" in await page.inner_text(f"#supersedes li[data-id='{rex_id}']")

        # the list by status: Rex only under "Superseded" (GET /v1/memories?status=superseded), marked
        await _go(page, f"#/memories?project={project}")
        assert "My dog is called Rex" not in await page.inner_text("#memory-list")
        await _go(page, f"#/memories?project={project}&status=superseded")
        assert await page.input_value("#status-filter") == "superseded"
        assert await page.locator(f"#memory-list tr[data-id='{rex_id}'][data-status='superseded']").count() == 1
        assert "My dog is called Bruno" not in await page.inner_text("#memory-list")
        await _go(page, f"#/memory/{project}/{bruno_id}")

        # pin Bruno, give it an expiry, clear it: each checked through REST, each shown as a badge
        assert await page.inner_text("#pin-toggle") == "Pin"
        before = await _rendered(page)
        await page.click("#pin-toggle")
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        assert _memory(h, bruno_id)["pinned"] is True
        assert await page.inner_text("#pin-toggle") == "Unpin" and await page.locator("#truth-badges .badge.pinned").count() == 1
        await page.fill("#pin input[type=datetime-local]", "2030-01-02T10:30")
        before = await _rendered(page)
        await page.click("#expiry-set")
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        expiry = _memory(h, bruno_id)["forget_after"]
        assert expiry and expiry.startswith("2030-01-0"), expiry
        assert "expires on" in await page.inner_text("#truth-badges .badge.expires")
        await page.screenshot(path=str(shots / "console-memory-pinned.png"), full_page=True)
        before = await _rendered(page)
        await page.click("#expiry-clear")
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        assert _memory(h, bruno_id)["forget_after"] is None and await page.locator("#truth-badges .badge.expires").count() == 0
        before = await _rendered(page)
        await page.click("#pin-toggle")
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        assert _memory(h, bruno_id)["pinned"] is False and await page.inner_text("#pin-toggle") == "Pin"

        # the same fact said again is merged: "said 2 times"
        # said again in a later conversation (a daily log no engine extracts: agent mode)
        assert h.put(f"/v1/projects/{project}/extraction-mode", json={"mode": "agent"}).status_code == 200
        log = h.post("/v1/daily-logs", json={"project": project, "log_date": "2026-12-01",
                                             "turns": [{"speaker": "user", "text": "My dog is called Bruno."}]})
        assert log.status_code == 200, log.text
        said = {"log_id": log.json()["id"], "task_id": "console-test", "turns": [0]}
        again = h.post("/v1/memories", json={"content": "My dog is called Bruno", "project": project, "provenance": said})
        assert again.status_code in (200, 201) and again.json()["memory_id"] == bruno_id, again.text
        assert _memory(h, bruno_id)["repeats"] == 2
        await _go(page, f"#/memory/{project}/{bruno_id}?again=1")   # (the same page: a new address redraws it)
        assert await page.inner_text("#truth-badges .badge.repeats") == "said 2 times"

        # search as of a past day (POST /v1/recall with as_of): nothing was said then; today, Bruno and not Rex
        recalls: list[dict[str, Any]] = []
        page.on("request", lambda r: recalls.append(json.loads(r.post_data or "{}")) if r.url.endswith("/v1/recall") else None)
        await _go(page, f"#/memories?project={project}")
        await page.fill("form[role=search] input[type=search]", "what is my dog called")
        await page.fill("#as-of", "2020-01-01")
        before = await _rendered(page)
        await page.click("form[role=search] button[type=submit]")
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        assert "as_of=2020-01-01" in page.url and recalls[-1]["as_of"].startswith(("2020-01-01", "2020-01-02"))
        assert await page.inner_text("#memory-list .empty") == "Nothing matches this search."
        await page.fill("#as-of", "")
        before = await _rendered(page)
        await page.click("form[role=search] button[type=submit]")
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        assert "as_of" not in recalls[-1] and "as_of" not in page.url
        shown = await page.eval_on_selector_all("table.memories tbody tr", "rs => rs.map(r => r.dataset.id)")
        assert bruno_id in shown and rex_id not in shown
        await page.screenshot(path=str(shots / "console-search-as-of.png"), full_page=True)

        # the merge undone from Bruno's versions (POST /v1/memories/{id}/unmerge): the saying is its own memory
        await _go(page, f"#/memory/{project}/{bruno_id}")
        button = page.locator("#versions li button.unmerge")
        assert await button.count() == 1
        # every saying listed, as the history's sayings say (the second in its own words)
        sayings = h.get(f"/v1/memories/{bruno_id}/history").json()["sayings"]
        assert len(sayings) == 2 and await page.inner_text("#said-title") == "Said 2 times"
        assert await page.locator("#sayings li").count() == 2
        await page.screenshot(path=str(shots / "console-memory-merged.png"), full_page=True)
        before = await _rendered(page)
        await button.click()
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        assert "Unmerged" in await page.inner_text("#notice")
        assert _memory(h, bruno_id)["repeats"] == 1 and await page.locator("#truth-badges .badge.repeats").count() == 0
        brunos = [m for m in h.get("/v1/memories", params={"project": project, "keyword": "Bruno"}).json()["memories"]]
        assert len(brunos) == 2 and {m["content"] for m in brunos} == {"My dog is called Bruno"}, brunos

        # narrow and dark: the conflicts view (another flagged pair, then "Both are true") and a superseded memory fit
        tom = h.post("/v1/memories", json={"content": "My cat is called Tom", "project": project}).json()["memory_id"]
        felix = h.post("/v1/memories", json={"content": "My cat is called Felix", "project": project}).json()
        assert tom in felix["flagged"], felix
        await page.set_viewport_size({"width": 390, "height": 820})
        await page.click("#theme")
        await _go(page, f"#/conflicts?project={project}")
        await _fits(page)
        await page.screenshot(path=str(shots / "console-conflicts-narrow-dark.png"), full_page=True)
        before = await _rendered(page)
        await page.click(f"li.conflict[data-other='{tom}'] button.keep-both")
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        assert "Both stand" in await page.inner_text("#conflict-out")
        assert _memory(h, tom)["status"] == "active" and _memory(h, felix["memory_id"])["status"] == "active"
        assert h.get("/v1/memories/conflicts", params={"project": project}).json()["conflicts"] == []
        await _go(page, f"#/memory/{project}/{rex_id}")
        await _fits(page)
        await page.screenshot(path=str(shots / "console-memory-superseded-narrow-dark.png"), full_page=True)

        # Bruno forgotten on its page (the person settled it wrongly): Rex, which it replaced, is current again
        await _forget_on_its_page(page, f"#/memory/{project}/{bruno_id}", "we never had a dog called Bruno")
        assert "The memory it had replaced is current again." in await page.inner_text("#notice")
        assert await page.inner_text("#replaced-title") == "It had replaced 1 older memory"
        assert await page.inner_text(f"#supersedes li[data-id='{rex_id}'] .badge") == "current again"
        await page.screenshot(path=str(shots / "console-forget-reinstated-narrow-dark.png"), full_page=True)
        back = _memory(h, rex_id)
        assert back["status"] == "active" and back.get("superseded_by") is None, back
        await _go(page, f"#/memory/{project}/{rex_id}")
        assert await page.locator("#truth-badges .badge.superseded").count() == 0

        # an edit that takes a change back ("I moved to Porto…" meant port wine): Lisbon is current again, and the
        # notice says so (POST /v1/memories/update answers reinstated)
        lisbon = h.post("/v1/memories", json={"content": "I live in Lisbon", "project": project}).json()["memory_id"]
        porto = h.post("/v1/memories", json={"content": "I moved to Porto last month", "project": project}).json()
        assert porto["supersedes"] == [lisbon], porto
        await _go(page, f"#/memory/{project}/{porto['memory_id']}")
        await page.fill("#edit textarea", "I like port wine from the Douro valley")
        before = await _rendered(page)
        await page.click("#edit button[type=submit]")
        await page.wait_for_function(f"() => engramConsole.rendered > {before} && engramConsole.busy === 0")
        assert "The memory it had replaced is current again: the new words no longer change it." in await page.inner_text("#notice")
        assert _memory(h, lisbon)["status"] == "active"
        await page.screenshot(path=str(shots / "console-edit-reinstated-narrow-dark.png"))

        assert not errors, errors
        await context.close()
    h.close()
