"""`engram up` on a machine with nothing running: embedded NATS and Postgres, a key, a config;
Ctrl-C stops everything; the next `engram up` still has every memory (and mints no second key)."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.e2e


def start_up(home: Path, *args: str, expect_key: bool = True) -> tuple[subprocess.Popen[str], str, str, list[str]]:
    """Start `engram up`; returns the process, the MCP URL, the API key printed ("" when none is
    expected: only the first start in a home, or --new-key, mints one) and the output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update({"ENGRAM_HOME": str(home)})
    proc = subprocess.Popen(
        [sys.executable, "-m", "deploy", "up", "--port", "0", "--auth-port", "0", *args], env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    lines: list[str] = []
    deadline = time.monotonic() + 180
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip())
        if "Press Ctrl-C to stop" in line:
            output = "\n".join(lines)
            url = re.search(r"MCP URL:\s+(\S+)", output)
            key = re.search(r"API key:\s+(egm_\S+)", output)
            assert url and bool(key) == expect_key, output
            return proc, url.group(1), key.group(1) if key else "", lines
    proc.kill()
    raise AssertionError("engram up did not start:\n" + "\n".join(lines))


def stop_up(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, out
    return out


def rest(url: str, key: str, path: str, body: dict) -> httpx.Response:  # type: ignore[type-arg]
    base = url.removesuffix("/mcp")
    return httpx.post(base + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def kill_and_wait_for_restart(home: Path, service: str) -> int:
    """kill -9 a service of the running `engram up`; returns the pid of its restarted process."""
    def entry() -> dict:  # type: ignore[type-arg]
        return {p["name"]: p for p in json.loads((home / "supervisor.json").read_text())["processes"]}[service]

    before = entry()
    assert before["state"] == "running" and before["pid"], before
    os.kill(before["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        now = entry()
        if now["state"] == "running" and now["restarts"] == before["restarts"] + 1:
            assert oct((home / "supervisor.json").stat().st_mode & 0o777) == "0o600"
            return int(now["pid"])
        assert time.monotonic() < deadline, now
        time.sleep(0.1)


def assert_locked_down(home: Path, elsewhere: Path) -> None:
    """Issue 21 finding 1: the home is its owner's alone, and the port alone opens nothing."""
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    for name in ("stack.json", "credentials.json"):
        assert stat.S_IMODE((home / name).stat().st_mode) == 0o600, name
    opened = [str(p) for p in home.rglob("*") if not p.is_symlink() and stat.S_IMODE(p.lstat().st_mode) & 0o077]
    assert opened == [], opened
    assert any((home / "qdrant").rglob("*")), "the vector store wrote nothing"
    nats_url = json.loads((home / "stack.json").read_text())["nats_url"]
    bare = "nats://" + nats_url.rpartition("@")[2]
    # the attack of the report: an empty home, the port, an admin key
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env |= {"ENGRAM_HOME": str(elsewhere / "empty-home"), "ENGRAM_NATS_URL": bare}
    attack = subprocess.run([sys.executable, "-m", "deploy", "keys", "create", "--scope", "admin"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert attack.returncode == 1 and "egm_" not in attack.stdout, attack.stdout
    assert "refused the credentials" in attack.stderr and "Authorization Violation" in attack.stderr, attack.stderr


def test_up_save_restart_recall(tmp_path: Path) -> None:
    home = tmp_path / "engram-home"
    proc, url, key, lines = start_up(home)
    try:
        output = "\n".join(lines)
        assert '"mcpServers"' in output and url in output and "Bearer egm_" in output
        assert rest(url, key, "/v1/memories", {"content": "My first car was a red Fiat 500"}).status_code == 201
        assert_locked_down(home, tmp_path)
        restarted_pid = kill_and_wait_for_restart(home, "memory")
        # stack.json follows the restart right after supervisor.json (two files, one after the other)
        deadline = time.monotonic() + 30
        while json.loads((home / "stack.json").read_text())["pids"].get("memory") != restarted_pid:
            assert time.monotonic() < deadline, (home / "stack.json").read_text()
            time.sleep(0.1)
        saved = rest(url, key, "/v1/memories", {"content": "I was born in Lyon"})
        assert saved.status_code in (201, 202), saved.text
    finally:
        stopped = stop_up(proc)
    assert "Engram stopped." in stopped
    # issue 20: the crash was reported (why, and when it came back), and the rest kept running
    assert "the memory service killed by SIGKILL (signal 9)" in stopped, stopped
    assert "restarted the memory" in stopped and "Stopping Engram" in stopped, stopped
    assert (home / "stack.json").exists()

    proc, url, _, lines = start_up(home, expect_key=False)
    try:
        output = "\n".join(lines)
        assert "made by the first `engram up`" in output and "engram keys create --user" in output, output
        assert json.loads((home / "stack.json").read_text())["api_key_id"] in output
        hits = rest(url, key, "/v1/recall", {"query": "what was my first car?"}).json()["hits"]
        assert hits and hits[0]["memory"]["content"] == "My first car was a red Fiat 500"
        env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")} | {"ENGRAM_HOME": str(home)}
        created = subprocess.run([sys.executable, "-m", "deploy", "keys", "create", "--name", "friend"],
                                 env=env, capture_output=True, text=True, timeout=60)
        assert created.returncode == 0, created.stderr
        new_key = re.search(r"^(egm_\S+)$", created.stdout, re.MULTILINE)
        assert new_key, created.stdout
        theirs = rest(url, new_key.group(1), "/v1/recall", {"query": "first car"}).json()["hits"]
        assert theirs == []
        status = subprocess.run([sys.executable, "-m", "deploy", "status"], env=env | {"COLUMNS": "200"}, capture_output=True,
                                text=True, timeout=60)
        assert status.returncode == 0 and "memory-projector" in status.stdout, status.stdout + status.stderr
        assert "Processes (engram up)" in status.stdout and "running" in status.stdout, status.stdout
    finally:
        stop_up(proc)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")} | {"ENGRAM_HOME": str(home)}
    replayed = subprocess.run([sys.executable, "-m", "deploy", "replay", "memory", "--yes"], env=env,
                              capture_output=True, text=True, timeout=300)
    assert replayed.returncode == 0 and "Rebuilt the memory read models" in replayed.stdout, replayed.stdout + replayed.stderr
    proc, url, key3, _ = start_up(home, "--new-key")
    try:
        assert key3 != key
        hits = rest(url, key3, "/v1/recall", {"query": "what was my first car?"}).json()["hits"]
        assert hits and hits[0]["memory"]["content"] == "My first car was a red Fiat 500"
    finally:
        stop_up(proc)
    leftovers = subprocess.run(["pgrep", "-f", str(home)], capture_output=True, text=True).stdout.split()
    assert leftovers == [], "processes left running after Ctrl-C"
