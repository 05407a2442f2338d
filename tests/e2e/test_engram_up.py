"""`engram up` on a machine with nothing running: embedded NATS and Postgres, a key, a config;
Ctrl-C stops everything; the next `engram up` still has every memory."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.e2e


def start_up(home: Path) -> tuple[subprocess.Popen[str], str, str, list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update({"ENGRAM_HOME": str(home)})
    proc = subprocess.Popen(
        [sys.executable, "-m", "deploy", "up", "--port", "0"], env=env, text=True,
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
            assert url and key, output
            return proc, url.group(1), key.group(1), lines
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


def test_up_save_restart_recall(tmp_path: Path) -> None:
    home = tmp_path / "engram-home"
    proc, url, key, lines = start_up(home)
    try:
        output = "\n".join(lines)
        assert '"mcpServers"' in output and url in output and "Bearer egm_" in output
        assert rest(url, key, "/v1/memories", {"content": "My first car was a red Fiat 500"}).status_code == 201
    finally:
        stopped = stop_up(proc)
    assert "Engram stopped." in stopped
    assert (home / "stack.json").exists()

    proc, url, key2, _ = start_up(home)
    try:
        assert key2 != key
        hits = rest(url, key2, "/v1/recall", {"query": "what was my first car?"}).json()["hits"]
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
    finally:
        stop_up(proc)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")} | {"ENGRAM_HOME": str(home)}
    replayed = subprocess.run([sys.executable, "-m", "deploy", "replay", "memory", "--yes"], env=env,
                              capture_output=True, text=True, timeout=300)
    assert replayed.returncode == 0 and "Rebuilt the memory read models" in replayed.stdout, replayed.stdout + replayed.stderr
    proc, url, key3, _ = start_up(home)
    try:
        hits = rest(url, key3, "/v1/recall", {"query": "what was my first car?"}).json()["hits"]
        assert hits and hits[0]["memory"]["content"] == "My first car was a red Fiat 500"
    finally:
        stop_up(proc)
    leftovers = subprocess.run(["pgrep", "-f", str(home)], capture_output=True, text=True).stdout.split()
    assert leftovers == [], "processes left running after Ctrl-C"
