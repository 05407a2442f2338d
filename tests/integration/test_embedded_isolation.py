"""Issue 29 finding M2: the embedded servers `engram up` starts as root are out of every other
local account's reach, ``nobody`` included.

PostgreSQL refuses to run as root, so a root `engram up` runs it as an unprivileged account. When
that account was ``nobody``, any other process running as ``nobody`` (NFS-squashed clients,
daemons dropping to it) passed the kernel's ptrace access check for the server and followed
``/proc/<pid>/cwd`` into the data folder, although ``ENGRAM_HOME`` is 0700: memories in the WAL
and in base/, and a writable ``pg_hba.conf``. The server now runs as an account of its own
(``engram-pg``, created when missing), which nothing else shares.

Each test starts the servers the way `engram up` does (a private home, its credentials, the
same constructor arguments as deploy/stack.py), then runs a probe as ``nobody`` (``setpriv``)
that tries every way in: the data folder by its path, ``/proc/<pid>/cwd``, ``/proc/<pid>/root``,
``/proc/<pid>/fd`` and ``/proc/<pid>/environ`` of the server and of each of its processes. Every
path is first checked to be there (as root), so a refusal is a refusal, not a typo.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from deploy.credentials import StackCredentials, private_home
from deploy.embedded.nats import EmbeddedNats
from deploy.embedded.postgres import EmbeddedPostgres

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or os.geteuid() != 0,
        reason="exercises what a root `engram up` starts (Linux, run as root)",
    ),
]

# Run as nobody with `python -I -S`: try each access, report how each went.
_PROBE = r"""
import json, os, sys
results = {}
for kind, path in json.loads(sys.argv[1]):
    try:
        if kind == "list":
            os.listdir(path)
        elif kind == "read":
            with open(path, "rb") as fh:
                fh.read(1)
        elif kind == "write":
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))  # opens only: nothing is written
        elif kind == "readlink":
            os.readlink(path)
        results[kind + " " + path] = "ALLOWED"
    except OSError as exc:
        results[kind + " " + path] = type(exc).__name__
print(json.dumps(results))
"""


def _nobody() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' account")


def _as_nobody(attempts: list[tuple[str, str]]) -> dict[str, str]:
    """Run the probe as nobody (no groups, no capabilities); how each attempt went."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is needed to act as nobody")
    nobody = _nobody()
    result = subprocess.run(
        [setpriv, f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
         "--inh-caps=-all", sys.executable, "-I", "-S", "-c", _PROBE, json.dumps(attempts)],
        capture_output=True, text=True, cwd="/", timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return dict(json.loads(result.stdout))


def _as_root(attempts: list[tuple[str, str]]) -> dict[str, str]:
    """The same probe as root: each path must exist (and open) for the refusal to mean anything."""
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _PROBE, json.dumps(attempts)],
        capture_output=True, text=True, cwd="/", timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return dict(json.loads(result.stdout))


def _process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (the postmaster's backends and auxiliary processes)."""
    children: dict[int, list[int]] = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat_file.parent.name))
    tree, todo = [pid], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            tree.append(child)
            todo.append(child)
    return tree


def _ways_in(pids: list[int], data_dir: Path, files: list[str], writable: list[str]) -> list[tuple[str, str]]:
    """Every way a local process could try to reach ``data_dir`` of servers ``pids``."""
    attempts: list[tuple[str, str]] = [("list", str(data_dir))]
    attempts += [("read", str(data_dir / name)) for name in files]
    for pid in pids:
        proc = f"/proc/{pid}"
        attempts += [
            ("list", f"{proc}/cwd"),
            ("list", f"{proc}/fd"),
            ("read", f"{proc}/environ"),
            ("list", f"{proc}/root{data_dir}"),
            ("readlink", f"{proc}/cwd"),
        ]
        attempts += [("read", f"{proc}/cwd/{name}") for name in files]
        attempts += [("write", f"{proc}/cwd/{name}") for name in writable]
    return attempts


def _assert_refused(attempts: list[tuple[str, str]]) -> None:
    as_root = _as_root(attempts)
    missing = {what: how for what, how in as_root.items() if how != "ALLOWED"}
    assert not missing, f"the probe's paths are wrong (even root cannot): {missing}"
    got_in = {what: how for what, how in _as_nobody(attempts).items() if how != "PermissionError"}
    assert not got_in, f"a process running as nobody got in: {got_in}"


def _home(tmp_path: Path) -> tuple[Path, StackCredentials]:
    """A home as `engram up` makes it (Stack.start): private, with its credentials."""
    home = tmp_path / "root-home" / ".engram"
    home.parent.mkdir(mode=0o700)
    private_home(home)
    return home, StackCredentials.load_or_create(home)


async def _save(url: str, content: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS memo (id serial PRIMARY KEY, body text NOT NULL)")
        await conn.execute("INSERT INTO memo (body) VALUES ($1)", content)
        await conn.execute("CHECKPOINT")  # into base/ as well as the WAL
    finally:
        await conn.close()


async def _rows(url: str) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        return [row["body"] for row in await conn.fetch("SELECT body FROM memo ORDER BY id")]
    finally:
        await conn.close()


def _cluster_files(data_dir: Path) -> list[str]:
    """Files of the cluster holding memory contents and its configuration, relative to it."""
    wal = sorted(p.name for p in (data_dir / "pg_wal").iterdir() if p.is_file())
    tables = sorted(str(p.relative_to(data_dir)) for p in (data_dir / "base").rglob("*") if p.is_file())
    return ["PG_VERSION", "pg_hba.conf", "postgresql.auto.conf", "global/pg_control",
            f"pg_wal/{wal[0]}", tables[-1]]  # fmt: skip


def _only_account_of_its_ids(uid: int, gid: int) -> None:
    account = pwd.getpwuid(uid)
    assert account.pw_name != "nobody" and uid != _nobody().pw_uid and uid != 0, account
    assert [a.pw_name for a in pwd.getpwall() if a.pw_uid == uid] == [account.pw_name]
    assert [a.pw_name for a in pwd.getpwall() if a.pw_gid == gid] == [account.pw_name]
    assert grp.getgrgid(gid).gr_mem == []  # no other account is a member of its group


async def test_nobody_cannot_reach_the_embedded_postgres_of_a_root_engram_up(tmp_path: Path) -> None:
    home, credentials = _home(tmp_path)
    server = EmbeddedPostgres(home / "postgres", port=None, password=credentials.postgres_password)
    try:
        url = server.start()
        await _save(url, "the hotel door code is 4711")
        pid = server.pid
        assert pid is not None
        conn = await asyncpg.connect(url)  # a backend whose cwd is the data folder too
        try:
            pids = _process_tree(pid)
            assert len(pids) > 2, pids
            files = _cluster_files(home / "postgres")
            _assert_refused(_ways_in(pids, home / "postgres", files, writable=["pg_hba.conf"]))
        finally:
            await conn.close()
        st = (home / "postgres").stat()
        _only_account_of_its_ids(st.st_uid, st.st_gid)
        status = Path(f"/proc/{pid}/status").read_text()
        assert f"Uid:\t{st.st_uid}\t{st.st_uid}\t{st.st_uid}\t{st.st_uid}" in status
    finally:
        server.stop()


def test_nobody_cannot_reach_the_embedded_nats_of_a_root_engram_up(tmp_path: Path) -> None:
    home, credentials = _home(tmp_path)
    server = EmbeddedNats(
        home / "nats", port=None, user=credentials.nats_user, password=credentials.nats_password
    )
    try:
        server.start()
        pid = server.pid
        assert pid is not None
        files = ["nats-server.conf", "nats-server.log"]  # the conf holds the NATS password
        _assert_refused(_ways_in([pid], home / "nats", files, writable=["nats-server.conf"]))
    finally:
        server.stop()


async def test_a_cluster_left_to_nobody_by_an_older_engram_is_given_to_its_own_account(
    tmp_path: Path,
) -> None:
    """An older Engram ran the server as nobody: the next start hands the cluster over, data kept."""
    home, credentials = _home(tmp_path)
    data = home / "postgres"
    server = EmbeddedPostgres(data, port=None, password=credentials.postgres_password)
    try:
        await _save(server.start(), "kept across the hand-over")
    finally:
        server.stop()
    nobody = _nobody()
    for folder, dirs, files in os.walk(data):  # what the older Engram left: every file nobody's
        for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            os.chown(name, nobody.pw_uid, nobody.pw_gid, follow_symlinks=False)
    try:
        url = server.start()
        assert await _rows(url) == ["kept across the hand-over"]
        pid = server.pid
        assert pid is not None
        _assert_refused(_ways_in([pid], data, _cluster_files(data), writable=["pg_hba.conf"]))
        st = data.stat()
        _only_account_of_its_ids(st.st_uid, st.st_gid)
        left = [str(p) for p in data.rglob("*") if p.lstat().st_uid == nobody.pw_uid]
        assert left == [], left
    finally:
        server.stop()
