"""The memory graph as an MCP App and as the web page /graph, against a running stack.

- Through the `mcp` SDK client: the tools' metadata (`_meta.ui.resourceUri` and the legacy flat key,
  the app-only visibility), the `ui://` resource (mimeType, self-contained), `structuredContent`,
  paging by cursor and by page number, a pinned connection and a project-restricted key.
- In headless Chromium (Debian's `chromium`, driven by playwright; nothing downloaded): the app's
  HTML inside a small host page that speaks the MCP Apps bridge and forwards the app's tool calls
  to the real gateway through the SDK client — it draws the first page, loads the next, opens a
  memory's versions and where it came from, searches with `recall`, goes fullscreen and switches
  theme; then the web page /graph, signed in by a Bearer header and by its sign-in form, with its
  project filter. Screenshots go to ENGRAM_SCREENSHOTS_DIR when set (docs/screenshots/ holds the
  README's), else to the test's temporary folder.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.e2e

APP_URI = "ui://engram/memory-graph.html"
APP_MIME = "text/html;profile=mcp-app"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
TURNS = [
    {"speaker": "user", "text": "Morning! I finally moved to Lisbon last month."},
    {"speaker": "assistant", "text": "Congratulations! How is it going?"},
    {"speaker": "user", "text": "Great. I work as a product designer at a small studio."},
    {"speaker": "assistant", "text": "Nice."},
    {"speaker": "user", "text": "My sister is called Marta. I want to learn to sail this summer."},
]
FACTS = [
    ("preference", "preference.drink", "Prefers green tea in the morning"),
    ("preference", "preference.food", "Vegetarian; loves Thai curry"),
    ("skill", "skill.language", "Is learning Rust on weekends"),
    ("goal", "goal.running", "Training for a half marathon in April"),
    ("relationship", "relationship.pet", "Has a cat named Miso"),
    ("user_profile", "profile.hometown", "Grew up in Porto"),
    ("preference", "preference.music", "喜欢听爵士乐，尤其是 Bill Evans"),
    ("conversation_style", "style.answers", "Wants short answers with code first"),
]


def auth(key: str, pin: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}"}
    if pin:
        headers["X-Engram-Project"] = pin
    return headers


@asynccontextmanager
async def session(running: Any, key: str | None = None, pin: str | None = None) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers=auth(key or running.key, pin), timeout=httpx2.Timeout(30.0, read=60.0))
    async with http, Client(streamable_http_client(running.mcp_url, http_client=http)) as client:
        yield client


async def call(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None, result.content
    return result.structured_content  # type: ignore[no-any-return]


def text_of(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


async def all_pages(client: Client, limit: int, **arguments: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """Every page of fetch-graph-data: (nodes, edges, pages)."""
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    cursor, pages = None, 0
    while True:
        page = await call(client, "fetch-graph-data", limit=limit, **({"cursor": cursor} if cursor else {}), **arguments)
        nodes += page["nodes"]
        edges += page["edges"]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            return nodes, edges, pages
        assert pages < 1000


@dataclass
class GraphData:
    project: str
    other: str
    memory_ids: dict[str, str]  # memory_key -> id
    updated_id: str
    extracted_ids: list[str]
    log_date: str


@pytest.fixture(scope="module")
def graph_data(running) -> GraphData:  # type: ignore[no-untyped-def]
    return asyncio.run(_graph_data(running))


async def _graph_data(running: Any) -> GraphData:
    run = uuid.uuid4().hex[:6]
    project, other = f"life-{run}", f"work-{run}"
    async with session(running) as client:
        ids = {}
        for category, key, content in FACTS:
            saved = await call(client, "save_memory", category=category, memory_key=key, content=content,
                               importance=4 if "tea" in content or "cat" in content else 3, containerTag=project)
            ids[key] = saved["memory_id"]
        # a new version of one fact: its history has two versions
        await call(client, "update_memory", memory_key="preference.drink", content="Prefers oolong tea now, no sugar",
                   containerTag=project)
        for text in ("Reviews pull requests before lunch", "The team ships on Thursdays"):
            await client.call_tool("memory", {"content": text, "containerTag": other})
        log_date = "2025-05-03"
        await call(client, "save_daily_log", log_date=log_date, turns=TURNS, topics="moving, family",
                   containerTag=project)
        # bounded waits (nothing is timed): the extractor turns the log into memories with provenance
        # and marks it processed once all are saved; then the graph shows the log and every memory
        processed = False
        for _ in range(600):
            nodes, _, _ = await all_pages(client, 1000, project=project)
            processed = any(n["type"] == "log" and n["detail"].get("status") == "processed" for n in nodes)
            if processed:
                break
            await asyncio.sleep(0.2)
        assert processed, "the daily log was not processed"
        listed = (await call(client, "recall_memory", limit=100, containerTag=project))["memories"]
        extracted = [m["id"] for m in listed if m.get("provenance")]
        assert extracted, "the extractor produced no memory from the daily log"
        for _ in range(600):
            node_ids = {n["id"] for n in (await all_pages(client, 1000, project=project))[0]}
            if set(ids.values()) | set(extracted) <= node_ids:
                break
            await asyncio.sleep(0.2)
        assert set(ids.values()) | set(extracted) <= node_ids, "the graph does not show every saved memory"
    return GraphData(project, other, ids, ids["preference.drink"], extracted, log_date)


# ---------------------------------------------------------------------------------------------
# Through the mcp SDK client
# ---------------------------------------------------------------------------------------------
async def test_tools_resource_and_structured_content(running, graph_data: GraphData) -> None:  # type: ignore[no-untyped-def]
    async with session(running) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        graph, data = tools["memory-graph"], tools["fetch-graph-data"]
        assert graph.meta["ui"]["resourceUri"] == APP_URI and graph.meta["ui/resourceUri"] == APP_URI
        assert "visibility" not in graph.meta["ui"]  # the model's tool (and the app's): the default
        assert graph.annotations is not None and graph.annotations.read_only_hint is True
        assert data.meta["ui"] == {"resourceUri": APP_URI, "visibility": ["app"]}
        assert {"cursor", "limit", "project", "page"} <= set(data.input_schema["properties"])
        assert "containerTag" in graph.input_schema["properties"]
        assert {"nodes", "edges", "next_cursor", "total", "counts"} <= set(graph.output_schema["properties"])

        listed = {str(r.uri): r for r in (await client.list_resources()).resources}
        assert listed[APP_URI].mime_type == APP_MIME
        contents = (await client.read_resource(APP_URI)).contents
        assert len(contents) == 1 and contents[0].mime_type == APP_MIME
        html = contents[0].text
        assert html.lower().startswith("<!doctype html>") and "ui/initialize" in html and "fetch-graph-data" in html
        assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html), "the app loads nothing from the network"

        # the first page: nodes, edges, counts, next cursor, and a text summary for hosts without apps
        result = await client.call_tool("memory-graph", {"containerTag": graph_data.project, "limit": 5})
        assert not result.is_error, result.content
        view = result.structured_content
        assert len(view["nodes"]) == 5 and view["next_cursor"] and view["project"] == graph_data.project
        assert view["counts"]["nodes"] == 5 and sum(view["counts"]["by_type"].values()) == 5
        assert view["counts"]["edges"] == len(view["edges"])
        total = view["total"]
        assert total >= len(FACTS) + len(graph_data.extracted_ids) + 1  # + the log (+ the project node)
        summary = text_of(result)
        assert f"5 of {total} nodes" in summary and graph_data.project in summary

        # every node once across pages; every page's edges among nodes seen so far; the same by page number
        nodes, edges, pages = await all_pages(client, 4, project=graph_data.project)
        ids = [n["id"] for n in nodes]
        assert len(ids) == len(set(ids)) == total and pages == -(-total // 4)
        assert {n["project"] for n in nodes if n["type"] == "memory"} == {graph_data.project}
        assert set(graph_data.memory_ids.values()) | set(graph_data.extracted_ids) <= set(ids)
        assert all(e["source"] in ids and e["target"] in ids for e in edges)
        second = await call(client, "fetch-graph-data", project=graph_data.project, limit=4, page=2)
        assert [n["id"] for n in second["nodes"]] == ids[4:8]
        beyond = await call(client, "fetch-graph-data", project=graph_data.project, limit=4, page=pages + 1)
        assert beyond["nodes"] == [] and beyond["next_cursor"] is None
        both = await client.call_tool("fetch-graph-data", {"cursor": view["next_cursor"], "page": 2})
        assert both.is_error and "cursor or page" in text_of(both)
        bad = await client.call_tool("fetch-graph-data", {"limit": 1001})
        assert bad.is_error and "limit" in text_of(bad)
        # the extracted memories come from the log (derives edges, the log's node)
        log_ids = {n["id"] for n in nodes if n["type"] == "log"}
        derived = {e["target"] for e in edges if e["type"] == "derives" and e["source"] in log_ids}
        assert set(graph_data.extracted_ids) <= derived


async def test_a_pin_and_a_restricted_key_see_only_their_project(running, graph_data: GraphData) -> None:  # type: ignore[no-untyped-def]
    async with session(running, pin=graph_data.other) as pinned:
        tools = {t.name: t for t in (await pinned.list_tools()).tools}
        assert "containerTag" not in tools["memory-graph"].input_schema["properties"]
        assert "project" not in tools["fetch-graph-data"].input_schema["properties"]
        view = await call(pinned, "memory-graph")
        assert view["project"] == graph_data.other
        assert {n["project"] for n in view["nodes"] if n["type"] != "project"} == {graph_data.other}
        nodes, _, _ = await all_pages(pinned, 1)
        assert not set(graph_data.memory_ids.values()) & {n["id"] for n in nodes}
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        admin = (await asyncio.to_thread(running.stack.create_key, running.user_id, "graph-admin", ["admin"]))["key"]
        made = h.post("/v1/keys", headers=auth(admin), json={
            "user_id": running.user_id, "name": "work graph", "scopes": ["memory:read"], "project": graph_data.other})
        assert made.status_code == 201, made.text
    async with session(running, key=made.json()["key"]) as restricted:
        nodes, _, _ = await all_pages(restricted, 1000)
        assert nodes and {n["project"] for n in nodes if n["type"] != "project"} == {graph_data.other}
        refused = await restricted.call_tool("memory-graph", {"containerTag": graph_data.project})
        assert refused.is_error and "permission denied" in text_of(refused)
        refused = await restricted.call_tool("fetch-graph-data", {"project": graph_data.project})
        assert refused.is_error and "permission denied" in text_of(refused)
    async with session(running, key=running.other_key) as bob:  # another user sees none of it
        nodes, _, _ = await all_pages(bob, 1000)
        assert not {graph_data.project, graph_data.other} & {n.get("project") for n in nodes}


# ---------------------------------------------------------------------------------------------
# In headless Chromium
# ---------------------------------------------------------------------------------------------
chromium_only = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (Debian: apt-get install chromium)")

HOST_PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>
html,body{margin:0;height:100%;background:#e5e7eb}#app{display:block;width:100%;height:100%;border:0}</style></head>
<body><iframe id="app" sandbox="allow-scripts"></iframe><script>
// a minimal MCP Apps host: answers the bridge and forwards tools/call to the gateway (through Python)
const frame = document.getElementById('app');
window.host = { theme: 'light', displayMode: 'inline', log: [], initialized: false };
const toApp = (m) => frame.contentWindow.postMessage(Object.assign({ jsonrpc: '2.0' }, m), '*');
window.hostSend = (method, params) => toApp({ method, params });
window.addEventListener('message', async (event) => {
  if (event.source !== frame.contentWindow) return;
  const msg = event.data;
  host.log.push(msg.method);
  if (msg.method === 'ui/initialize') {
    toApp({ id: msg.id, result: { protocolVersion: '2026-01-26', hostInfo: { name: 'engram-test-host', version: '1' },
      hostCapabilities: { serverTools: {} }, hostContext: { theme: host.theme, displayMode: 'inline',
      availableDisplayModes: ['inline', 'fullscreen'], containerDimensions: { width: innerWidth, height: innerHeight } } } });
  } else if (msg.method === 'ui/notifications/initialized') {
    host.initialized = true;
  } else if (msg.method === 'tools/call') {
    try { toApp({ id: msg.id, result: await window.mcpCallTool(msg.params.name, msg.params.arguments || {}) }); }
    catch (err) { toApp({ id: msg.id, error: { code: -32000, message: String(err) } }); }
  } else if (msg.method === 'ui/request-display-mode') {
    host.displayMode = msg.params.mode;
    toApp({ id: msg.id, result: { mode: host.displayMode } });
  }
});
</script></body></html>"""


def screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("ENGRAM_SCREENSHOTS_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@asynccontextmanager
async def browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        chromium = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield chromium
        finally:
            await chromium.close()


async def click_node(page: Any, app: Any, node_id: str) -> None:
    """Click a node where the app draws it (the app frame's offset in the page added)."""
    await app.wait_for_function("() => engramGraph.stats().settled", timeout=60_000)
    x, y = await app.evaluate("(id) => engramGraph.screenPosition(id)", node_id)
    box = await (await app.frame_element()).bounding_box()
    await page.mouse.click(box["x"] + x, box["y"] + y)


@chromium_only
async def test_the_app_in_a_host_draws_pages_history_search_and_theme(running, graph_data: GraphData, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    shots = screenshots(tmp_path)
    async with session(running) as client, browser() as chromium:
        app_html = (await client.read_resource(APP_URI)).contents[0].text  # as a host reads it
        calls: list[str] = []

        async def mcp_call_tool(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            calls.append(name)
            result = await client.call_tool(name, arguments)
            return result.model_dump(by_alias=True, mode="json", exclude_none=True)

        page = await chromium.new_page(viewport={"width": 1100, "height": 700})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        await page.expose_function("mcpCallTool", mcp_call_tool)
        await page.set_content(HOST_PAGE)
        await page.evaluate("(html) => { document.getElementById('app').srcdoc = html; }", app_html)
        await page.wait_for_function("() => host.initialized === true")
        app = page.frames[1]

        # the host calls memory-graph (as the model would) and hands the app its input and result
        arguments = {"containerTag": graph_data.project, "limit": 12}
        first = await client.call_tool("memory-graph", arguments)
        await page.evaluate("(a) => hostSend('ui/notifications/tool-input', { arguments: a })", arguments)
        await page.evaluate("(r) => hostSend('ui/notifications/tool-result', r)",
                            first.model_dump(by_alias=True, mode="json", exclude_none=True))
        await app.wait_for_function("() => engramGraph.stats().nodes === 12")
        stats = await app.evaluate("engramGraph.stats()")
        assert stats["total"] == first.structured_content["total"] and stats["nextCursor"]
        assert stats["project"] == graph_data.project and stats["theme"] == "light"
        assert set(await app.evaluate("engramGraph.nodeIds()")) == {n["id"] for n in first.structured_content["nodes"]}
        assert "fetch-graph-data" not in calls  # the first page came from the tool result

        # load more: the next page through fetch-graph-data, every node once, until the last page
        while (await app.evaluate("engramGraph.stats().nextCursor")) is not None:
            before = await app.evaluate("engramGraph.stats().nodes")
            await app.click("#more")
            await app.wait_for_function(f"() => engramGraph.stats().nodes > {before} && !engramGraph.stats().loading")
        stats = await app.evaluate("engramGraph.stats()")
        assert "fetch-graph-data" in calls and stats["nodes"] == stats["total"]
        drawn = await app.evaluate("engramGraph.nodeIds()")
        assert len(drawn) == len(set(drawn)) and set(graph_data.extracted_ids) <= set(drawn)
        assert stats["types"].get("log") == 1 and stats["edges"] > 0
        await app.wait_for_function("() => engramGraph.stats().settled", timeout=60_000)
        await page.screenshot(path=str(shots / "memory-graph-light.png"))

        # a memory's versions (get_memory_history) and, for an extracted one, where it came from
        await click_node(page, app, graph_data.updated_id)
        await app.wait_for_function("() => document.querySelectorAll('#versions .version').length === 2")
        versions = await app.inner_text("#versions")
        assert "Prefers oolong tea now" in versions and "Prefers green tea in the morning" in versions
        assert (await app.evaluate("engramGraph.stats().selected")) == graph_data.updated_id
        await page.screenshot(path=str(shots / "memory-graph-history.png"))
        await click_node(page, app, graph_data.extracted_ids[0])
        await app.wait_for_selector("#origin .provenance")
        origin = await app.inner_text("#origin")
        assert f"Daily log {graph_data.log_date}" in origin and "Extracted from" in origin
        await app.click("#details .close")

        # search: recall, and its hits highlighted on the graph
        await app.fill("#q", "oolong tea")
        await app.press("#q", "Enter")
        await app.wait_for_function("() => engramGraph.stats().searchHits.length > 0")
        stats = await app.evaluate("engramGraph.stats()")
        assert "recall" in calls and graph_data.updated_id in stats["highlighted"]

        # fullscreen through the host, and the host's theme
        await app.click("#fullscreen")
        await app.wait_for_function("() => engramGraph.stats().displayMode === 'fullscreen'")
        assert (await page.evaluate("host.displayMode")) == "fullscreen" and "ui/request-display-mode" in await page.evaluate("host.log")
        light_bg = await app.evaluate("getComputedStyle(document.body).backgroundColor")
        await page.evaluate("hostSend('ui/notifications/host-context-changed', { theme: 'dark' })")
        await app.wait_for_function("() => engramGraph.stats().theme === 'dark'")
        assert await app.evaluate("getComputedStyle(document.body).backgroundColor") != light_bg
        await page.screenshot(path=str(shots / "memory-graph-dark-search.png"))
        assert not errors, errors


@chromium_only
async def test_the_web_page_signed_in_by_header_and_by_its_form(running, graph_data: GraphData, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    shots = screenshots(tmp_path)
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        direct = h.get("/graph", headers=auth(running.key))
        assert direct.status_code == 200 and 'data-signed-in="1"' in direct.text
        assert direct.headers["cache-control"] == "no-store" and "frame-ancestors 'none'" in direct.headers["content-security-policy"]
        anonymous = h.get("/graph")
        assert anonymous.status_code == 200 and 'data-signed-in="0"' in anonymous.text
        assert running.key not in direct.text
        app = h.get("/graph/app.html")
        assert app.status_code == 200 and "connect-src 'none'" in app.headers["content-security-policy"]
        assert h.post("/graph").status_code == 405

    async with browser() as chromium:
        # a request carrying the key as a Bearer header (scripts, tests) gets the graph at once
        context = await chromium.new_context(viewport={"width": 1200, "height": 760},
                                             extra_http_headers=auth(running.key))
        page = await context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        await page.goto(running.base_url + "/graph")
        assert await page.is_hidden("#signin")
        app = page.frame_locator("#app")
        await app.locator("#canvas").wait_for()
        frame = next(f for f in page.frames if f.url.endswith("/graph/app.html") or "/graph/app.html?" in f.url)
        await frame.wait_for_function("() => engramGraph.stats().nodes > 0")
        # the project filter: only that project's nodes
        options = await page.eval_on_selector_all("#project option", "os => os.map(o => o.value)")
        assert graph_data.project in options and graph_data.other in options
        await page.select_option("#project", graph_data.project)
        frame = await _app_frame(page)
        await frame.wait_for_function("() => engramGraph.stats().nodes > 0 && engramGraph.stats().project !== null")
        while (await frame.evaluate("engramGraph.stats().nextCursor")) is not None:
            await frame.click("#more")
            await frame.wait_for_function("() => !engramGraph.stats().loading")
        stats = await frame.evaluate("engramGraph.stats()")
        assert stats["project"] == graph_data.project
        assert set(graph_data.memory_ids.values()) <= set(await frame.evaluate("engramGraph.nodeIds('memory')"))
        await frame.wait_for_function("() => engramGraph.stats().settled", timeout=60_000)
        await click_node(page, frame, graph_data.extracted_ids[0])
        await frame.wait_for_selector("#origin .provenance")
        await page.screenshot(path=str(shots / "graph-page.png"))
        await page.click("#theme")  # the page's theme reaches the app as host context
        await frame.wait_for_function("() => engramGraph.stats().theme === 'dark'")
        await context.close()

        # a browser without a key: OAuth sign-in (the auth service's login and consent pages), a
        # read-only token kept in the tab; the code leaves the address bar at once
        context = await chromium.new_context(viewport={"width": 1200, "height": 760}, color_scheme="dark")
        page = await context.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        await page.goto(running.base_url + "/graph")
        await page.wait_for_selector("#signin:not([hidden])")
        await page.screenshot(path=str(shots / "graph-page-sign-in.png"))
        # the person's part, in the browser: the auth service's sign-in and consent pages (their
        # forms post with the page's own Origin, which their CSRF check requires)
        asked: list[str] = []
        page.on("request", lambda req: asked.append(req.url) if req.url.startswith(running.auth_url + "/authorize") else None)
        await page.click("#oauth-go")
        await page.wait_for_selector("#username", timeout=60_000)
        assert asked, "the page did not start the OAuth flow"
        query = dict(httpx.URL(asked[0]).params)
        assert query["code_challenge_method"] == "S256" and query["scope"] == "memory:read"
        assert query["redirect_uri"] == running.base_url + "/graph" and query["resource"] == running.mcp_url
        await page.fill("#username", running.username)
        await page.fill("#password", running.password)
        await page.click("button[type=submit]")
        await page.wait_for_selector("button[value=approve]", timeout=60_000)
        await page.click("button[value=approve]")
        await page.wait_for_url(lambda url: url.startswith(running.base_url + "/graph"), timeout=60_000)
        frame = await _app_frame(page)
        await frame.wait_for_function("() => engramGraph.stats().nodes > 0")
        assert "code=" not in page.url and "state=" not in page.url
        token = await page.evaluate("sessionStorage.getItem('engram.graph.key')")
        assert token and token != running.key
        with httpx.Client(base_url=running.base_url, timeout=60) as h:
            who = h.get("/v1/whoami", headers=auth(token)).json()
        assert who["user_id"] == running.user_id and who["scopes"] == ["memory:read"]
        await page.click("#signout")
        await page.wait_for_selector("#signin:not([hidden])")

        # ... or an API key pasted into the form; it too is kept in the tab, never in the URL
        await page.fill("#key", "egm_not-a-real-key")
        await page.click("#signin-go")
        await page.wait_for_function("() => document.getElementById('signin-error').textContent.includes('refused')")
        await page.fill("#key", running.key)
        await page.click("#signin-go")
        frame = await _app_frame(page)
        await frame.wait_for_function("() => engramGraph.stats().nodes > 0")
        assert await frame.evaluate("engramGraph.stats().theme") == "dark"
        assert running.key not in page.url and "key" not in page.url
        assert await page.evaluate("sessionStorage.getItem('engram.graph.key')") == running.key
        await page.click("#signout")
        await page.wait_for_selector("#signin:not([hidden])")
        assert await page.evaluate("sessionStorage.getItem('engram.graph.key')") is None
        await context.close()
        assert not errors, errors


async def _app_frame(page: Any) -> Any:
    """The app's frame once a (re)mounted app has answered its host."""
    await page.wait_for_function("() => window.engramHost && window.engramHost.appReady === true")
    return next(f for f in page.frames if "/graph/app.html" in f.url)
