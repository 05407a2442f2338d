"""The compose deployment, run for real: `make compose-test`.

The images are built here from registry packages (deploy/images/build.py: Debian's packages and
PyPI; cached by their inputs), and deploy/compose/docker-compose.yml — the file a Docker user runs
— is brought up with podman-compose, with embedded-vectors.yml on top (no Qdrant server exists
here). Everything is checked from outside the containers, through the one published port (the
proxy's), with the `mcp` SDK client: every container's own healthcheck passes; a memory saved and
recalled; a daily log extracted into memories by the extractor; the graph page (HTTP, and in
Chromium when it is installed); the memory service killed with SIGKILL is started again by its
restart policy and nothing is lost; `down` then `up` keeps every memory (the volumes); finally
`down -v`. Only the containers, networks and volumes of this run's own compose project are stopped
or removed.

podman here runs no systemd, which is what runs its healthchecks on a timer: this module runs each
container's declared healthcheck itself (`podman healthcheck run`, every few seconds), and
podman-compose 1.6 on podman 4.3 starts services without waiting for `service_healthy` (the
services wait: NATS reconnects, restart policies). Waits are bounded polls; nothing is timed but
printed.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_daily_log_tools import call, session

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = ROOT / "deploy" / "compose"
FILES = ["-f", "docker-compose.yml", "-f", "embedded-vectors.yml"]
BUILD = ROOT / "deploy" / "images" / "build.py"
CONTAINERS_CONF = ROOT / "deploy" / "images" / "containers.conf"
PODMAN_COMPOSE = Path(sys.executable).parent / "podman-compose"
#: what each service runs in the stack (embedded-vectors.yml: one memory replica)
SERVICES = ["nats-1", "nats-2", "nats-3", "postgres", "gateway", "auth", "memory", "extractor", "graph", "proxy"]
#: no healthcheck of its own: the proxy is checked by the requests that go through it
WITHOUT_HEALTHCHECK = {"proxy"}
WAIT_S = 600
TURNS = [
    {"speaker": "user", "text": "Good morning!"},
    {"speaker": "assistant", "text": "Good morning! What's new?"},
    {"speaker": "user", "text": "I moved to Valparaiso last week. I work as a marine biologist."},
    {"speaker": "assistant", "text": "That sounds exciting."},
]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [pytest.mark.compose,
              pytest.mark.skipif(not shutil.which("podman"), reason="podman is not installed (apt-get install podman runc)")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], env=podman_env(), capture_output=True, text=True, check=check,
                          timeout=timeout)


@dataclass
class Stack:
    project: str
    env: dict[str, str]
    port: int
    volumes: set[str] = field(default_factory=set)  # every volume this run's containers mounted

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def compose(self, *args: str, timeout: float = 600) -> None:
        started = time.monotonic()
        proc = subprocess.run([str(PODMAN_COMPOSE), "-p", self.project, *FILES, *args], cwd=COMPOSE_DIR,
                              env=self.env, capture_output=True, text=True, timeout=timeout, check=False)
        print(f"podman-compose {' '.join(args)}: {time.monotonic() - started:.0f} s", flush=True)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    def containers(self) -> dict[str, str]:
        """service -> container name, for this project's containers (any state)."""
        out = podman("ps", "-a", "--filter", f"label=io.podman.compose.project={self.project}",
                     "--format", "{{.Names}}\t{{index .Labels \"io.podman.compose.service\"}}").stdout
        found = {}
        for line in out.splitlines():
            name, _, service = line.partition("\t")
            found[service] = name
        return found

    def remember_volumes(self) -> None:
        for name in self.containers().values():
            mounts = json.loads(podman("inspect", name, "--format", "{{json .Mounts}}").stdout)
            self.volumes |= {m["Name"] for m in mounts if m["Type"] == "volume"}

    def inspect(self, container: str) -> dict[str, Any]:
        return json.loads(podman("inspect", container).stdout)[0]  # type: ignore[no-any-return]


class HealthChecks:
    """Runs every container's declared healthcheck every few seconds (podman's systemd timer does
    it where systemd runs) and keeps each one's last answer."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.last: dict[str, tuple[bool, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HealthChecks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        while not self._stop.is_set():
            for service, name in self.stack.containers().items():
                if service in WITHOUT_HEALTHCHECK:
                    continue
                proc = podman("healthcheck", "run", name, check=False, timeout=60)
                self.last[service] = (proc.returncode == 0, (proc.stdout + proc.stderr).strip()[-300:])
            self._stop.wait(3)

    def wait_healthy(self, services: list[str]) -> None:
        started = time.monotonic()
        deadline = started + WAIT_S
        while time.monotonic() < deadline:
            if all(self.last.get(s, (False, ""))[0] for s in services if s not in WITHOUT_HEALTHCHECK):
                print(f"every service healthy after {time.monotonic() - started:.0f} s", flush=True)
                return
            time.sleep(1)
        sick = {s: self.last.get(s) for s in services if not self.last.get(s, (False, ""))[0]}
        logs = {s: podman("logs", "--tail", "30", self.stack.containers()[s], check=False).stderr[-2000:]
                for s in sick if s in self.stack.containers()}
        raise AssertionError(f"not healthy: {sick}\n{logs}")

    def forget(self) -> None:
        self.last.clear()


@dataclass
class Shared:
    """What one test leaves for the next (the module runs in file order)."""

    key: str = ""
    project: str = "compose-" + uuid.uuid4().hex[:8]
    saved: dict[str, str] = field(default_factory=dict)  # memory id -> content


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    assert PODMAN_COMPOSE.exists(), "podman-compose is not in the venv: `make compose-test` installs it"
    started = time.monotonic()
    env_file = tmp_path_factory.mktemp("images") / "images.env"
    images = subprocess.run([sys.executable, str(BUILD), "--env-file", str(env_file)], capture_output=True,
                            text=True, check=False)
    print(images.stdout[-3000:], flush=True)
    assert images.returncode == 0, images.stdout[-2000:] + images.stderr[-4000:]
    variables = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    assert {"IMAGE_ENGRAM", "IMAGE_NATS", "IMAGE_POSTGRES", "IMAGE_PROXY", "IMAGE_BASE"} <= set(variables), images.stdout
    print(f"images ready: {time.monotonic() - started:.0f} s", flush=True)
    port = free_port()
    env = {k: v for k, v in podman_env().items() if not k.startswith("ENGRAM_")} | variables | {
        "NATS_PASSWORD": secrets.token_hex(24),
        "NATS_CLUSTER_PASSWORD": secrets.token_hex(24),
        "QDRANT_API_KEY": secrets.token_hex(24),  # required by the main file; no Qdrant runs
        "POSTGRES_PASSWORD": secrets.token_hex(24),
        "HTTP_PORT": f"127.0.0.1:{port}",  # published on loopback only
        "ENGRAM_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "ENGRAM_EMBEDDER_THREADS": "1",
    }
    running = Stack(project="engramct" + uuid.uuid4().hex[:6], env=env, port=port)
    try:
        running.compose("up", "-d", "--no-build")
        running.remember_volumes()
        yield running
    finally:
        running.remember_volumes()
        running.compose("down", "-v")
        # podman-compose's `down -v` leaves the anonymous volumes (the image's VOLUME /data)
        leftover = [v for v in running.volumes
                    if podman("volume", "exists", v, check=False).returncode == 0]
        if leftover:
            podman("volume", "rm", *leftover)
        print(f"compose stack run: {time.monotonic() - started:.0f} s in all", flush=True)


@pytest.fixture(scope="module")
def health(stack: Stack) -> Iterator[HealthChecks]:
    with HealthChecks(stack) as checks:
        yield checks


@pytest.fixture(scope="module")
def shared() -> Shared:
    return Shared()


def create_key(stack: Stack) -> str:
    """`engram keys create` inside the auth container, as docs/deployment.md tells a user."""
    auth = stack.containers()["auth"]
    proc = podman("exec", "-e", "COLUMNS=1000", auth, "engram", "keys", "create", "--name", "compose-test",
                  check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    header = next(i for i, line in enumerate(lines) if line.startswith("API key for user"))
    return lines[header + 1]


def headers(shared: Shared) -> dict[str, str]:
    return {"Authorization": f"Bearer {shared.key}"}


async def listed(stack: Stack, shared: Shared) -> dict[str, str]:
    async with session(stack.base_url + "/mcp", headers(shared)) as client:
        memories = (await call(client, "recall_memory", limit=100, containerTag=shared.project))["memories"]
    return {m["id"]: m["content"] for m in memories}


async def recalls(stack: Stack, shared: Shared, query: str, expected: str) -> bool:
    async with session(stack.base_url + "/mcp", headers(shared)) as client:
        result = await client.call_tool("recall", {"query": query, "containerTag": shared.project})
    return expected in "\n".join(c.text for c in result.content if getattr(c, "text", None))


async def poll(check: Any, what: str, seen: dict[str, Any] | None = None) -> None:
    """Wait (bounded) until check() is true; on failure say the last error and what was last seen."""
    started = time.monotonic()
    while time.monotonic() - started < WAIT_S:
        try:
            if await check():
                print(f"{what}: {time.monotonic() - started:.1f} s", flush=True)
                return
        except Exception as exc:  # noqa: BLE001 - the stack still starting (the MCP client wraps errors in groups)
            last = exc
        await asyncio.sleep(1)
    raise AssertionError(f"{what}: not within {WAIT_S} s (last error {locals().get('last')!r}; last seen {seen})")


def service_logs(stack: Stack, *services: str) -> str:
    """The last lines each service logged (for a failure's message)."""
    out = []
    for service in services:
        proc = podman("logs", "--tail", "15", stack.containers()[service], check=False)
        out.append(f"--- {service}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return "\n".join(out)


# --- the checks, in order ------------------------------------------------------------------------


def test_every_service_runs_and_is_healthy(stack: Stack, health: HealthChecks) -> None:
    assert set(stack.containers()) == set(SERVICES), stack.containers()
    health.wait_healthy(SERVICES)


def test_only_the_proxy_publishes_a_port_on_the_host(stack: Stack) -> None:
    published = {}
    for service, name in stack.containers().items():
        ports = stack.inspect(name)["NetworkSettings"]["Ports"] or {}
        published[service] = {p: b for p, b in ports.items() if b}
    assert {s for s, p in published.items() if p} == {"proxy"}, published
    (bindings,) = published["proxy"].values()
    assert bindings == [{"HostIp": "127.0.0.1", "HostPort": str(stack.port)}], bindings


def test_the_engram_services_run_as_non_root(stack: Stack) -> None:
    for service in ("gateway", "auth", "memory", "extractor", "graph"):
        name = stack.containers()[service]
        assert stack.inspect(name)["Config"]["User"] == "10001:10001", service
        uid = podman("exec", name, "id", "-u").stdout.strip()
        assert uid == "10001", (service, uid)


async def test_through_the_proxy_only_public_paths(stack: Stack) -> None:
    with httpx.Client(base_url=stack.base_url, timeout=30) as h:
        assert h.get("/health").status_code == 200

        async def auth_answers() -> bool:
            # a service its restart policy started again has a new address: the proxy re-resolves
            # names every 10 s (502 until then)
            meta = h.get("/.well-known/oauth-authorization-server")  # auth, through the proxy
            return meta.status_code == 200 and meta.json()["issuer"] == stack.base_url

        await poll(auth_answers, "auth's OAuth metadata through the proxy")
        for internal in ("/metrics", "/readyz", "/healthz"):
            assert h.get(internal).status_code == 404, internal
        assert h.post("/mcp", json={}).status_code == 401  # no credential


async def test_mcp_round_trip(stack: Stack, shared: Shared) -> None:
    shared.key = create_key(stack)
    async with session(stack.base_url + "/mcp", headers(shared)) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"save_memory", "recall", "save_daily_log"} <= tools
        for content in ("Prefers green tea over coffee", "Keeps a cello in the hallway closet"):
            saved = await call(client, "save_memory", category="preference", content=content,
                               containerTag=shared.project)
            assert saved["success"], saved
            shared.saved[saved["memory_id"]] = content

    async def found() -> bool:
        return await recalls(stack, shared, "What does the user like to drink?", "green tea")

    await poll(found, "a saved memory recalled")


async def test_a_daily_log_is_extracted_into_memories(stack: Stack, shared: Shared) -> None:
    async with session(stack.base_url + "/mcp", headers(shared)) as client:
        saved = await call(client, "save_daily_log", log_date="2025-04-12", turns=TURNS, containerTag=shared.project)
        assert saved["created"]

    async def extracted() -> bool:
        contents = " | ".join((await listed(stack, shared)).values())
        return "Valparaiso" in contents and "marine biologist" in contents

    await poll(extracted, "daily log extracted by the extractor")
    shared.saved = await listed(stack, shared)
    assert len(shared.saved) >= 4, shared.saved


async def test_the_graph_page_and_the_console_load(stack: Stack, shared: Shared) -> None:
    with httpx.Client(base_url=stack.base_url, timeout=30) as h:
        page = h.get("/graph", headers=headers(shared))
        assert page.status_code == 200 and 'data-signed-in="1"' in page.text
        app = h.get("/graph/app.html")
        assert app.status_code == 200 and app.headers["content-type"].startswith("text/html"), app.text[:300]
        console = h.get("/console")  # the web console, through the proxy too
        assert console.status_code == 200 and console.headers["content-type"].startswith("text/html"), console.text[:300]
    if not CHROMIUM:
        print("chromium not installed: the graph page was checked over HTTP only", flush=True)
        return
    from tests.e2e.test_graph_app import browser

    async with browser() as chromium:
        context = await chromium.new_context(extra_http_headers=headers(shared))
        tab = await context.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        await tab.goto(stack.base_url + "/graph")
        try:
            await tab.frame_locator("#app").locator("#canvas").wait_for(timeout=120_000)
            frame = next(f for f in tab.frames if "/graph/app.html" in f.url)
            await frame.wait_for_function("() => engramGraph.stats().nodes > 0", timeout=120_000)
        except Exception as exc:
            raise AssertionError(f"the graph page did not draw: {exc}; page errors: {errors}") from exc
        memory_nodes = set(await frame.evaluate("engramGraph.nodeIds('memory')"))
        await context.close()
    assert errors == [], errors
    assert memory_nodes, "the graph shows no memory"


async def test_a_killed_container_is_restarted_and_nothing_is_lost(stack: Stack, health: HealthChecks,
                                                                   shared: Shared) -> None:
    name = stack.containers()["memory"]
    before = stack.inspect(name)
    init_pid = before["State"]["Pid"]
    children = Path(f"/proc/{init_pid}/task/{init_pid}/children").read_text().split()
    assert children, "the memory container's init has no child"
    # SIGKILL to the service process from outside (an OOM kill, a crash): its init exits with it
    os.kill(int(children[0]), signal.SIGKILL)
    # a memory saved while memory is down waits in JetStream and is handled once it is back
    try:
        async with session(stack.base_url + "/mcp", headers(shared)) as client:
            during = await client.call_tool("save_memory", {"category": "preference", "containerTag": shared.project,
                                                            "content": "Saved while the memory service was down"})
    except Exception as exc:
        raise AssertionError(f"a save while memory is down was refused: {exc!r}\n{service_logs(stack, 'proxy', 'gateway')}") from exc
    print(f"save while memory was down answered: error={during.is_error} {during.structured_content}", flush=True)

    async def restarted() -> bool:
        state = stack.inspect(name)
        return (bool(state["State"]["Running"]) and state["State"]["Pid"] != init_pid
                and state["RestartCount"] > before["RestartCount"])

    await poll(restarted, "memory restarted by its restart policy")
    health.forget()
    health.wait_healthy(SERVICES)

    seen: dict[str, Any] = {}

    async def all_there() -> bool:
        now = seen["listed"] = await listed(stack, shared)
        return set(shared.saved) <= set(now) and "Saved while the memory service was down" in now.values()

    await poll(all_there, "every memory listed after the restart, and the one saved meanwhile", seen)
    shared.saved = await listed(stack, shared)
    assert await recalls(stack, shared, "Where does the user live?", "Valparaiso")


async def test_down_and_up_keeps_every_memory(stack: Stack, health: HealthChecks, shared: Shared) -> None:
    stack.remember_volumes()
    stack.compose("down")
    assert stack.containers() == {}
    health.forget()
    stack.compose("up", "-d", "--no-build")
    stack.remember_volumes()
    health.wait_healthy(SERVICES)

    seen: dict[str, Any] = {"expected": shared.saved}

    async def same() -> bool:
        seen["listed"] = await listed(stack, shared)
        return seen["listed"] == shared.saved

    await poll(same, "every memory listed after down and up", seen)
    # the vectors survived too (the memory volume): recall by meaning, not only the listing
    assert await recalls(stack, shared, "What does the user like to drink?", "green tea")
    assert await recalls(stack, shared, "What is the user's job?", "marine biologist")
