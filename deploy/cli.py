"""The `engram` command line: run the stack or one service, manage API keys and users, show status."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from contracts.auth import Scope
from deploy.dlq import app as dlq_app
from deploy.export_import import register as register_portability
from kit.config import default_home

app = typer.Typer(help="Engram: long-term memory for AI assistants, served over MCP.", no_args_is_help=True)
keys = typer.Typer(help="Create, list and revoke API keys.", no_args_is_help=True)
app.add_typer(keys, name="keys")
users = typer.Typer(help="Create, list and disable users who sign in with a password (OAuth).", no_args_is_help=True)
app.add_typer(users, name="users")
app.add_typer(dlq_app, name="dlq")
console = Console()
err = Console(stderr=True)

SERVICE_MAINS = {
    "gateway": "services.gateway.main",
    "auth": "services.auth.main",
    "memory": "services.memory.main",
    "extractor": "services.extractor.main",
    "graph": "services.graph.main",
}


@app.command()
def up(
    home: Annotated[Path | None, typer.Option(help="data folder (env ENGRAM_HOME)")] = None,
    nats_url: Annotated[str | None, typer.Option(help="use this NATS instead of starting one (env ENGRAM_NATS_URL)")] = None,
    database_url: Annotated[str | None, typer.Option(help="use this Postgres instead of starting one (env ENGRAM_DATABASE_URL)")] = None,
    port: Annotated[int, typer.Option(help="gateway port; a free one is used when taken")] = 8080,
    host: Annotated[str, typer.Option(help="gateway bind address")] = "127.0.0.1",
    public_url: Annotated[str | None, typer.Option(help="externally visible base URL")] = None,
    auth_port: Annotated[int, typer.Option(help="OAuth sign-in server port; a free one is used when taken")] = 8081,
    auth_public_url: Annotated[str | None, typer.Option(help="externally visible URL of the sign-in server")] = None,
    new_key: Annotated[bool, typer.Option("--new-key", help="mint a new API key (one is minted only at the first start)")] = False,
    replicas: Annotated[int, typer.Option(min=1, max=8, help="processes of every service (memory replicas each keep their own embedded vector shard, "
                                                           "following the event log, unless ENGRAM_QDRANT_URL names a Qdrant server)")] = 1,
    extraction: Annotated[str | None, typer.Option(
        help="who learns from daily logs by default: auto (the engine, at once), agent (external agents only), "
             "handoff (agents first; env ENGRAM_EXTRACTION)")] = None,
) -> None:
    """Start NATS, Postgres and every service on this machine; print the MCP URL (and, at the first
    start or with --new-key, an API key)."""
    from deploy.stack import StackOptions, run_up

    modes = ("auto", "agent", "handoff")
    if extraction is not None and extraction not in modes:
        raise typer.BadParameter(f"choose one of {', '.join(modes)}", param_hint="--extraction")
    options = StackOptions(
        home=(home or default_home()).expanduser().resolve(),
        nats_url=nats_url or os.environ.get("ENGRAM_NATS_URL"),
        database_url=database_url or os.environ.get("ENGRAM_DATABASE_URL"),
        namespace=os.environ.get("ENGRAM_NAMESPACE", "engram"),
        gateway_host=host,
        gateway_port=port,
        public_url=public_url or os.environ.get("ENGRAM_PUBLIC_URL"),
        auth_port=auth_port,
        auth_public_url=auth_public_url or os.environ.get("ENGRAM_AUTH_PUBLIC_URL"),
        new_key=new_key,
        replicas=replicas,
        extra_env={"ENGRAM_EXTRACTION": extraction} if extraction else {},
    )
    raise typer.Exit(run_up(options))


@app.command()
def serve(service: Annotated[str, typer.Argument(help="gateway | auth | memory | extractor | graph")]) -> None:
    """Run one service in the foreground, configured by ENGRAM_* environment variables."""
    module = SERVICE_MAINS.get(service)
    if module is None:
        err.print(f"[red]unknown service {service!r}[/red]: choose one of {', '.join(SERVICE_MAINS)}")
        raise typer.Exit(2)
    import importlib

    from deploy.embedded.ports import exit_when_orphaned

    exit_when_orphaned()  # started by `engram up`: not left running if it dies (and the stop hangs)
    importlib.import_module(module).main()


@app.command()
def probe(
    service: Annotated[str, typer.Argument(help="gateway | auth | memory | extractor | graph")],
    live: Annotated[bool, typer.Option("--live", help="liveness: fail only when NATS is up and the service is not connected")] = False,
    http: Annotated[str | None, typer.Option(help="readiness: this URL must answer 2xx too")] = None,
) -> None:
    """Container probe: is this container's service process connected to NATS? (exit 0 = yes).
    Manifests call the lighter `python -m deploy.probe`, which this runs."""
    from deploy.probe import main as probe_main

    args = [service] + (["--live"] if live else []) + (["--http", http] if http else [])
    raise typer.Exit(probe_main(args))


def _run(coro_factory):  # type: ignore[no-untyped-def]
    from kit.bus import BusUnavailable

    try:
        return asyncio.run(coro_factory())
    except BusUnavailable as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from exc


@keys.command("create")
def keys_create(
    user: Annotated[str | None, typer.Option(help="existing user id; omitted = a new user")] = None,
    name: Annotated[str, typer.Option(help="a label for the key")] = "cli",
    scope: Annotated[list[Scope] | None, typer.Option(help="scopes (repeat); default memory:read + memory:write")] = None,
    project: Annotated[str | None, typer.Option(help="restrict the key to one project")] = None,
    expires_in_days: Annotated[int | None, typer.Option(help="expiry in days")] = None,
) -> None:
    """Create an API key (shown once) — for a new user unless --user is given."""
    payload: dict[str, object] = {"name": name}
    if user:
        payload["user_id"] = user
    if scope:
        payload["scopes"] = [s.value for s in scope]
    if project:
        payload["project"] = project
    if expires_in_days:
        payload["expires_in_days"] = expires_in_days

    result = _admin("command", "create_api_key", payload)
    view = result["view"]
    console.print(f"API key for user {view['user_id']} (key id {view['key_id']}, scopes {', '.join(view['scopes'])}):")
    print(result["key"])
    console.print("[dim]Shown once: store it now. Use it as `Authorization: Bearer <key>`.[/dim]")


@keys.command("list")
def keys_list(user: Annotated[str | None, typer.Option(help="only this user's keys")] = None) -> None:
    """List API keys (never their secrets)."""
    result = _admin("query", "list_api_keys", {"user_id": user})
    table = Table("key id", "user", "name", "prefix", "scopes", "project", "last used", "state")
    for k in result["keys"]:
        state = "revoked" if k["revoked_at"] else "active"
        table.add_row(k["key_id"], k["user_id"], k["name"], k["prefix"] + "…", " ".join(k["scopes"]),
                      k["project"] or "-", (k["last_used_at"] or "never")[:19], state)
    console.print(table)


@keys.command("revoke")
def keys_revoke(key_id: Annotated[str, typer.Argument(help="the key id shown by `engram keys list`")]) -> None:
    """Revoke an API key; every gateway refuses it at once."""
    _admin("command", "revoke_api_key", {"key_id": key_id})
    console.print(f"Revoked key {key_id}.")


def _admin(kind: str, name: str, payload: dict[str, object]):  # type: ignore[no-untyped-def]
    from deploy.client import admin_command, admin_query, connect

    async def go():  # type: ignore[no-untyped-def]
        bus = await connect()
        try:
            if kind == "command":
                return await admin_command(bus, name, payload)
            return await admin_query(bus, name, payload)
        finally:
            await bus.close()

    reply = _run(go)
    if not reply.ok:
        err.print(f"[red]error:[/red] {reply.error}")
        raise typer.Exit(1)
    return reply.result


@users.command("create")
def users_create(
    username: Annotated[str, typer.Option(help="the sign-in name")],
    password: Annotated[str | None, typer.Option(help="the password (asked for when omitted)")] = None,
    user: Annotated[str | None, typer.Option(help="give this existing user (e.g. the owner of your API key) the login")] = None,
    name: Annotated[str | None, typer.Option(help="display name")] = None,
) -> None:
    """Create a user who signs in with a password (OAuth clients), or give an existing user a login.

    The password is hashed (scrypt) here; only the hash travels to the auth service."""
    from services.auth.main import WeakPassword, hash_password

    if password is None:
        password = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    try:
        password_hash = hash_password(password)
    except WeakPassword as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    payload: dict[str, object] = {"username": username, "password_hash": password_hash}
    if user:
        payload["user_id"] = user
    if name:
        payload["display_name"] = name
    result = _admin("command", "create_user", payload)
    console.print(f"User {result['user_id']} signs in as [bold]{result['username']}[/bold].")


@users.command("list")
def users_list() -> None:
    """List users."""
    result = _admin("query", "list_users", {})
    table = Table("user id", "username", "name", "created", "state")
    for u in result["users"]:
        table.add_row(u["user_id"], u["username"] or "-", u["name"], u["created_at"][:19],
                      "disabled" if u["disabled"] else "active")
    console.print(table)


@users.command("disable")
def users_disable(user_id: Annotated[str, typer.Argument(help="the user id shown by `engram users list`")]) -> None:
    """Disable a user: their API keys, OAuth tokens and sessions stop working on every gateway at once."""
    _admin("command", "disable_user", {"user_id": user_id})
    console.print(f"Disabled user {user_id}.")


@app.command()
def status() -> None:
    """Show what runs: the processes `engram up` supervises (state, pid, restarts, uptime, last exit),
    streams, consumers (pending, redelivered, lag) and the dead-letter count."""
    from deploy.status import collect, read_processes, render, render_processes

    async def go():  # type: ignore[no-untyped-def]
        from deploy.client import connect

        bus = await connect()
        try:
            return await collect(bus, database_url=_database_url())
        finally:
            await bus.close()

    render_processes(console, read_processes(default_home()))
    render(console, _run(go))


def _database_url() -> str | None:
    """Postgres of the running stack: the environment wins, then stack.json."""
    from deploy.client import StackInfo

    if os.environ.get("ENGRAM_DATABASE_URL"):
        return os.environ["ENGRAM_DATABASE_URL"]
    stack = StackInfo.load(default_home())
    return stack.database_url if stack else None


@app.command(name="replay")
def replay_command(
    service: Annotated[str, typer.Argument(help="the service whose read models to rebuild: memory | extractor | graph")],
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
    rebuild_index: Annotated[bool, typer.Option(
        "--rebuild-index",
        help="memory: drop the vector index and write every point (by default the points already right are kept, "
             "checked by fingerprint; use this after a change of embedding dimension or if the index files are damaged)",
    )] = False,
) -> None:
    """Drop a service's read models and rebuild them from the event log (stop the service first)."""
    if service == "extractor":
        _replay_extractor()
        return
    if service == "graph":
        _replay_graph(yes)
        return
    if service != "memory":
        err.print(f"[red]unknown service {service!r}[/red]: only `memory`, `extractor` and `graph` have read models "
                  "to replay")
        raise typer.Exit(2)
    from services.memory.config import MemorySettings
    from services.memory.main import replay as run_replay

    if not yes:
        what = "Postgres tables, vector index" if rebuild_index else "Postgres tables; vectors checked point by point"
        typer.confirm(f"Drop the memory read models ({what}) and rebuild them from events?", abort=True)
    report = _replay_with_progress(MemorySettings, functools.partial(run_replay, rebuild_index=rebuild_index))
    points = report.details
    console.print(
        f"Rebuilt the memory read models from {report.events:,} events "
        f"({report.applied:,} applied) in {report.seconds:.1f}s: {report.rate:,.0f} events/s. Vector index: "
        f"{points.get('points_written', 0):,} points written, {points.get('points_kept', 0):,} already right "
        f"and kept, {points.get('points_swept', 0):,} of no memory removed."
    )


def _replay_with_progress(settings_class: Any, run_replay: Any) -> Any:
    """Run a service's ``replay(settings, on_progress)`` with the service stopped, on the offline
    servers, with a progress bar (a line per step where there is no terminal); its report."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from kit.config import run_service
    from kit.pg import DatabaseUnavailable
    from kit.replay import ServiceRunning

    columns = (TextColumn("replaying events"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with contextlib.ExitStack() as servers:
        settings = _offline_settings(servers, settings_class)
        with Progress(*columns, console=console, disable=not console.is_terminal) as progress:
            task = progress.add_task("replay", total=None)
            log_line = ProgressLines(console) if not console.is_terminal else None  # logs, CI, kubectl

            def on_progress(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)
                if log_line is not None:
                    log_line(done, total)

            try:
                return run_service(run_replay(settings, on_progress))
            except (ServiceRunning, DatabaseUnavailable) as exc:
                err.print(f"[red]error:[/red] {exc}")
                raise typer.Exit(1) from exc


def _offline_settings(servers: contextlib.ExitStack, settings_class: Any) -> Any:
    """A service's settings for work done with the service stopped: the servers named in the
    environment, else this home's embedded NATS and Postgres, started for the work (and stopped
    with ``servers``)."""
    from deploy.stack import servers_for_offline_work

    if os.environ.get("ENGRAM_NATS_URL"):
        return settings_class()
    try:
        nats_url, database_url, namespace = servers.enter_context(servers_for_offline_work(default_home()))
    except RuntimeError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from exc
    return settings_class(nats_url=nats_url, database_url=database_url, namespace=namespace)


def _replay_graph(yes: bool) -> None:
    """The graph (nodes, edges, its similar-edge queue) rebuilt from the event log, with progress;
    the graph service must be stopped. Its 'similar' edges are asked again once it runs."""
    from services.graph.main import GraphSettings
    from services.graph.main import replay as run_replay

    if not yes:
        typer.confirm("Drop the memory graph and rebuild it from events?", abort=True)
    report = _replay_with_progress(GraphSettings, run_replay)
    console.print(f"Rebuilt the memory graph from {report.events:,} events ({report.applied:,} applied) in "
                  f"{report.seconds:.1f}s: {report.rate:,.0f} events/s.")


def _replay_extractor() -> None:
    """The extractor's read model (the tenants with daily logs, which its schedules visit) rebuilt
    from the event log; its task ledger is its own record and is kept. Safe while it runs."""
    from kit.config import run_service
    from kit.pg import DatabaseUnavailable
    from services.extractor.config import ExtractorSettings
    from services.extractor.main import replay as run_replay

    with contextlib.ExitStack() as servers:
        settings = _offline_settings(servers, ExtractorSettings)
        try:
            tenants = run_service(run_replay(settings))
        except DatabaseUnavailable as exc:
            err.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(1) from exc
    console.print(f"Rebuilt the extractor's tenant list from the event log: {tenants} tenant(s) with daily logs.")


@app.command(name="reextract")
def reextract_command(
    task_id: Annotated[str, typer.Option("--task-id", help="the new task id the results are recorded under")],
    since: Annotated[str | None, typer.Option(help="only logs of this day or later (YYYY-MM-DD)")] = None,
    engine: Annotated[str | None, typer.Option(help="builtin | llm (default: ENGRAM_EXTRACTOR_ENGINE)")] = None,
    user: Annotated[str | None, typer.Option(help="only this user's logs")] = None,
) -> None:
    """Run extraction again over past daily logs under a new task id (the memory service must be
    running). Results are recorded for the new task; memories change only through versioned
    updates; running it twice with the same task id changes nothing."""
    from datetime import date

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from kit.config import run_service
    from kit.pg import DatabaseUnavailable
    from services.extractor.config import ExtractorSettings
    from services.extractor.main import reextract as run_reextract

    try:
        day = date.fromisoformat(since) if since else None
    except ValueError as exc:
        err.print(f"[red]error:[/red] --since {since!r} is not a date (YYYY-MM-DD)")
        raise typer.Exit(2) from exc
    overrides: dict[str, str] = {}
    if not os.environ.get("ENGRAM_NATS_URL"):
        from deploy.client import StackInfo

        stack = StackInfo.load(default_home())
        if stack is None:
            err.print("[red]error:[/red] no running stack found: start one with `engram up` or set ENGRAM_NATS_URL")
            raise typer.Exit(1)
        overrides = {"nats_url": stack.nats_url, "database_url": stack.database_url, "namespace": stack.namespace}
    database_url = _database_url()
    if database_url:
        overrides["database_url"] = database_url
    settings = ExtractorSettings(**overrides)  # type: ignore[arg-type]
    columns = (TextColumn("re-extracting logs"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("reextract", total=None)
        log_line = ProgressLines(console, what="re-extracting logs", unit="logs") if not console.is_terminal else None

        def on_progress(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)
            if log_line is not None:
                log_line(done, total)

        try:
            report = run_service(run_reextract(settings, task_id, since=day, engine=engine,
                                               on_progress=on_progress, user=user))
        except ValueError as exc:
            err.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(2) from exc
        except DatabaseUnavailable as exc:
            err.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(1) from exc
    console.print(
        f"Task {report.task_id} ({report.engine}): {report.logs:,} logs, {report.done:,} extracted, "
        f"{report.already_done:,} already done, {report.failed:,} failed; {report.facts:,} facts: "
        f"{report.saved:,} new memories, {report.updated:,} updated, {report.kept:,} already known."
    )
    for error in report.errors[:5]:
        err.print(f"[yellow]failed:[/yellow] {error}")
    if report.failed:
        raise typer.Exit(1)


class ProgressLines:
    """Progress as a plain line every ``every_s`` seconds (and at the end), where no progress bar
    can be drawn: a log file, CI, `kubectl logs`."""

    def __init__(self, out: Console, every_s: float = 10.0, what: str = "replaying events",
                 unit: str = "events") -> None:
        self.out, self.every_s, self.what, self.unit = out, every_s, what, unit
        self.started = self.last = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s and done < total:
            return
        self.last = now
        rate = done / max(now - self.started, 1e-9)
        left = f", about {(total - done) / rate / 60:.0f} min left" if rate > 0 and done < total else ""
        share = f" ({100 * done / total:.0f}%)" if total else ""
        self.out.print(f"{self.what}: {done:,}/{total:,}{share}, {rate:,.0f} {self.unit}/s{left}", highlight=False)


@app.command(name="graph")
def graph_command(
    no_browser: Annotated[bool, typer.Option("--no-browser", help="only print the URL")] = False,
) -> None:
    """Open the memory graph of the running stack (the gateway's web page /graph) in the browser and
    print its URL. Sign in there with an API key (kept in the browser tab only, never in the URL)."""
    from deploy.client import StackInfo

    base = os.environ.get("ENGRAM_PUBLIC_URL")
    if not base:
        stack = StackInfo.load(default_home())
        if stack is None:
            err.print("[red]error:[/red] no running stack found: start one with `engram up` or set ENGRAM_PUBLIC_URL")
            raise typer.Exit(1)
        base = stack.gateway_url
    url = base.rstrip("/") + "/graph"
    console.print(f"Memory graph: {url}", highlight=False)
    if not no_browser:
        import webbrowser

        if not webbrowser.open(url):
            console.print("(no browser found here: open the URL yourself)")


register_portability(app)  # engram export | import | purge (deploy/export_import.py)


def main() -> None:
    app()
