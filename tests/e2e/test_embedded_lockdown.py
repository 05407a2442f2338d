"""Issue 21 finding 1: the embedded stack trusts no local process but its owner's.

A home made by an older Engram (NATS without authentication, Postgres with `trust`, the folder
0755 and its files 0644) is built here the way that version built it - the embedded servers
started without credentials, the services on them - and then `engram up` (the real command) must
close it in place: every memory and key kept, NATS and Postgres refusing anyone without the
credentials of ENGRAM_HOME/credentials.json, the folder 0700 and its files 0600, the CLI working
for the owner, no second API key minted.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import httpx
import nats
import pytest
from test_engram_up import start_up, stop_up  # tests/e2e is on sys.path (rootdir-relative imports)

from deploy.client import StackInfo
from deploy.embedded.nats import EmbeddedNats
from deploy.embedded.postgres import EmbeddedPostgres
from deploy.stack import Stack, StackOptions

pytestmark = pytest.mark.e2e


def _open_up(home: Path) -> None:
    """What an older Engram left: the home 0755, its files 0644 (the Postgres cluster excepted,
    which PostgreSQL keeps 0700 itself)."""
    home.chmod(0o755)
    for folder, dirs, files in os.walk(home):
        if Path(folder).is_relative_to(home / "postgres"):
            continue
        for name in dirs:
            if Path(folder, name) != home / "postgres":
                Path(folder, name).chmod(0o755)
        for name in files:
            Path(folder, name).chmod(0o644)


def _too_open(home: Path) -> list[str]:
    found = []
    for folder, dirs, files in os.walk(home):
        for name in [*dirs, *files]:
            path = Path(folder, name)
            if not path.is_symlink() and stat.S_IMODE(path.lstat().st_mode) & 0o077:
                found.append(f"{path} {oct(stat.S_IMODE(path.lstat().st_mode))}")
    return found


async def _nats_refuses(url: str) -> str:
    try:
        nc = await nats.connect(url, allow_reconnect=False, connect_timeout=3, max_reconnect_attempts=0)
    except nats.errors.Error as exc:
        return str(exc)
    await nc.close()
    raise AssertionError(f"NATS accepted {url}")


async def _postgres_refuses(url: str) -> str:
    try:
        conn = await asyncpg.connect(url, timeout=10)
    except asyncpg.InvalidPasswordError as exc:
        return str(exc)
    await conn.close()
    raise AssertionError(f"Postgres accepted {url}")


def _without_password(url: str) -> str:
    split = urlsplit(url)
    return split._replace(netloc=split.netloc.rpartition("@")[2]).geturl()


def test_an_old_home_is_closed_in_place_on_the_next_engram_up(tmp_path: Path) -> None:
    home = tmp_path / "old-home"
    home.mkdir()
    # --- an older Engram: servers without credentials, the services on them ---
    nats_server = EmbeddedNats(home / "nats", port=4222)
    postgres = EmbeddedPostgres(home / "postgres", port=5432)
    try:
        nats_url, database_url = nats_server.start(), postgres.start()
        assert "@" not in urlsplit(nats_url).netloc and urlsplit(database_url).password is None
        stack = Stack(StackOptions(home=home, nats_url=nats_url, database_url=database_url,
                                   gateway_port=0, auth_port=0), say=lambda _: None)
        try:
            stack.start()
            made = stack.create_key(None, name="engram up 2026-01-01 09:00")  # as the old `engram up` named it
            key, owner = made["key"], made["view"]["user_id"]
            saved = httpx.post(stack.gateway_url + "/v1/memories", json={"content": "The safe's code is 4711"},
                               headers={"Authorization": f"Bearer {key}"}, timeout=30)
            assert saved.status_code == 201, saved.text
        finally:
            stack.stop()
        StackInfo(nats_url=nats_url, database_url=database_url, namespace="engram", gateway_url=stack.gateway_url,
                  owner_user_id=owner, embedded_nats=True, embedded_postgres=True).save(home)
    finally:
        postgres.stop()
        nats_server.stop()
    info = json.loads((home / "stack.json").read_text())
    info.pop("api_key_id")  # the old stack.json had no such field
    (home / "stack.json").write_text(json.dumps(info))
    _open_up(home)
    assert not (home / "credentials.json").exists()
    assert "trust" in (home / "postgres" / "pg_hba.conf").read_text()
    assert stat.S_IMODE((home / "qdrant").stat().st_mode) == 0o755

    # --- the new `engram up` on it ---
    proc, url, _, lines = start_up(home, expect_key=False)
    try:
        output = "\n".join(lines)
        assert f"Made {home} private" in output
        assert made["view"]["key_id"] in output  # the old start's key, recognised by its name: none minted
        hits = httpx.post(url.removesuffix("/mcp") + "/v1/recall", json={"query": "code of the safe"},
                          headers={"Authorization": f"Bearer {key}"}, timeout=30).json()["hits"]
        assert hits and hits[0]["memory"]["content"] == "The safe's code is 4711"

        info = StackInfo.load(home)
        assert info is not None and info.api_key_id == made["view"]["key_id"]
        creds = json.loads((home / "credentials.json").read_text())
        assert creds["nats_password"] in info.nats_url and creds["postgres_password"] in info.database_url
        assert "Authorization Violation" in asyncio.run(_nats_refuses(_without_password(info.nats_url)))
        assert "Authorization Violation" in asyncio.run(_nats_refuses(info.nats_url.replace(creds["nats_password"], "guess")))
        assert "password authentication failed" in asyncio.run(_postgres_refuses(_without_password(info.database_url)))
        assert "scram-sha-256" in (home / "postgres" / "pg_hba.conf").read_text()

        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        for name in ("credentials.json", "stack.json"):
            assert stat.S_IMODE((home / name).stat().st_mode) == 0o600
        assert _too_open(home) == []

        env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")} | {"ENGRAM_HOME": str(home)}
        created = subprocess.run([sys.executable, "-m", "deploy", "keys", "create", "--user", owner], env=env,
                                 capture_output=True, text=True, timeout=60)
        assert created.returncode == 0 and re.search(r"^egm_\S+$", created.stdout, re.MULTILINE), created.stderr
    finally:
        stop_up(proc)
