"""Services started by a stack die with the process that started them, even when it is killed
without a chance to stop them (SIGKILL, a crashed benchmark)."""

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

from deploy.stack import ServiceProcess, Stack, StackOptions
from deploy.supervisor import CRASH_LOOPING, RestartPolicy, Supervised

pytestmark = [pytest.mark.unit, pytest.mark.skipif(sys.platform != "linux", reason="prctl is Linux-only")]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its (re)parent counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_service_process_is_terminated_when_its_parent_is_killed() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import subprocess, sys, time
            from deploy.stack import _terminate_with_parent
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                     start_new_session=True, preexec_fn=_terminate_with_parent)
            print(child.pid, flush=True)
            time.sleep(60)
        """)],
        stdout=subprocess.PIPE, text=True,
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def test_a_crash_looping_service_is_restarted_then_left_down(tmp_path: Path) -> None:
    """The process handling of the supervisor with a real process that exits at once (`engram serve`
    of an unknown service: exit code 2): restarted with backoff, then reported and left down."""
    stack = Stack(StackOptions(home=tmp_path), say=said.append)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    child = ServiceProcess("nonesuch", env, tmp_path / "logs" / "nonesuch.log")
    policy = RestartPolicy(initial_delay_s=0.05, max_delay_s=0.2, crash_loop_restarts=3, crash_loop_window_s=60)
    stack._children["nonesuch"] = child
    stack.supervised["nonesuch"] = Supervised("nonesuch", policy)
    stack.supervised["nonesuch"].started(time.time(), child.pid)
    deadline = time.monotonic() + 30
    while stack.supervised["nonesuch"].state != CRASH_LOOPING:
        assert time.monotonic() < deadline, stack.supervised["nonesuch"].to_json()
        stack.supervise()
        time.sleep(0.02)
    sup = stack.supervised["nonesuch"]
    assert sup.restarts == 3 and sup.last_exit == "exited with code 2"
    assert any("unknown service" in line for line in sup.last_log), sup.last_log
    log = child.log_path.read_text()
    assert log.count("restarted the nonesuch") == 3 and "crash-looping and left down" in log
    assert any("ERROR" in line and "crash-looping" in line for line in said), said
    state = json.loads((tmp_path / "supervisor.json").read_text())
    assert state["processes"][0]["state"] == CRASH_LOOPING
    assert oct((tmp_path / "supervisor.json").stat().st_mode & 0o777) == "0o600"
    stack.supervise()  # left down: nothing more happens
    assert sup.restarts == 3 and not child.alive()


said: list[str] = []
