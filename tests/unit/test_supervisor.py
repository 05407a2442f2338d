"""The restart decisions of `engram up` (deploy/supervisor.py): backoff, its reset after a stable
run, the crash-loop rule, exit reasons, and the state `engram status` shows. The clock is given."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from rich.console import Console

from deploy import probe
from deploy.status import Processes, render_processes
from deploy.supervisor import (
    CRASH_LOOPING,
    RESTARTING,
    RUNNING,
    STOPPED,
    RestartPolicy,
    Supervised,
    exit_reason,
    uptime_text,
)

pytestmark = pytest.mark.unit


def test_backoff_doubles_from_half_a_second_up_to_thirty() -> None:
    policy = RestartPolicy()
    assert [policy.delay(n) for n in range(1, 9)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_exit_reasons_name_the_signal_or_the_code() -> None:
    assert exit_reason(-9) == "killed by SIGKILL (signal 9)"
    assert exit_reason(-15) == "killed by SIGTERM (signal 15)"
    assert exit_reason(1) == "exited with code 1"
    assert exit_reason(0) == "exited with code 0"
    assert exit_reason(-99) == "killed by signal 99 (signal 99)"


def test_a_crash_is_restarted_after_the_backoff_and_counted() -> None:
    sup = Supervised("memory")
    sup.started(100.0, pid=10)
    assert sup.state == RUNNING and sup.restarts == 0
    decision = sup.exited(103.0, -9, ["boom"])
    assert decision.restart and decision.delay_s == 0.5 and decision.at == 103.5
    assert "killed by SIGKILL" in decision.message and "3.0 s up" in decision.message
    assert sup.state == RESTARTING and sup.pid is None and sup.last_log == ["boom"]
    assert not sup.due(103.4) and sup.due(103.5)
    sup.started(103.5, pid=11)
    assert sup.state == RUNNING and sup.restarts == 1 and sup.pid == 11
    assert sup.last_exit == "killed by SIGKILL (signal 9)"


def test_quick_crashes_back_off_and_a_stable_run_resets_the_delay() -> None:
    sup = Supervised("auth", RestartPolicy(crash_loop_restarts=100))
    now = 0.0
    sup.started(now, 1)
    delays = []
    for _ in range(4):
        now += 1.0
        decision = sup.exited(now, 1)
        delays.append(decision.delay_s)
        now = decision.at or now
        sup.started(now, 1)
    assert delays == [0.5, 1.0, 2.0, 4.0]
    now += 61.0  # a stable run
    assert sup.exited(now, 1).delay_s == 0.5


def test_five_restarts_within_a_minute_is_a_crash_loop_left_down() -> None:
    sup = Supervised("memory")
    now = 0.0
    sup.started(now, 1)
    for _ in range(5):
        decision = sup.exited(now + 0.1, 1)
        assert decision.restart
        now = decision.at or now
        sup.started(now, 2)
    assert sup.restarts == 5 and now < 60
    decision = sup.exited(now + 0.1, 1, ["Traceback", "ValueError: bad config"])
    assert not decision.restart and decision.at is None
    assert sup.state == CRASH_LOOPING and not sup.due(now + 1000)
    assert "crash-looping" in decision.message and "5 restarts within 60 s" in decision.message
    assert sup.to_json()["last_log"][-1] == "ValueError: bad config"


def test_restarts_spread_over_more_than_the_window_are_no_crash_loop() -> None:
    sup = Supervised("gateway", RestartPolicy(stable_after_s=1000))
    now = 0.0
    sup.started(now, 1)
    for _ in range(10):
        now += 20.0  # one crash every 20 s: at most 3 restarts in any minute
        decision = sup.exited(now, -11)
        assert decision.restart, decision.message
        now = decision.at or now
        sup.started(now, 1)
    assert sup.restarts == 10


def test_a_failed_restart_counts_as_an_exit_and_backs_off() -> None:
    sup = Supervised("postgres")
    sup.started(0.0, 1)
    sup.exited(1.0, -9)
    decision = sup.start_failed(1.5, "port 5432 on 127.0.0.1 is taken\nWhat to do: wait")
    assert decision.restart and decision.delay_s == 1.0
    assert sup.last_exit == "did not start: port 5432 on 127.0.0.1 is taken"
    assert "server" in decision.message
    for _ in range(4):  # a server that cannot start at all ends as a crash loop, not an endless retry
        decision = sup.start_failed(2.0, "port 5432 on 127.0.0.1 is taken")
    assert not decision.restart and sup.state == CRASH_LOOPING and sup.restarts == 0


def test_stopped_on_purpose_is_not_restarted() -> None:
    sup = Supervised("nats")
    sup.started(0.0, 1)
    sup.stopped()
    assert sup.state == STOPPED and not sup.due(100.0)


def test_uptime_text() -> None:
    assert uptime_text({"state": RUNNING, "started_at": 100.0}, 107.9) == "7s"
    assert uptime_text({"state": RUNNING, "started_at": 0.0 + 1}, 3662.0) == "1h01m01s"
    assert uptime_text({"state": RUNNING, "started_at": 1.0}, 125.0) == "2m04s"
    assert uptime_text({"state": RESTARTING, "started_at": 1.0}, 125.0) == "-"


def test_status_table_shows_state_pid_restarts_uptime_and_last_exit() -> None:
    sup = Supervised("memory")
    sup.started(1000.0, 42)
    sup.exited(1010.0, -9)
    sup.started(1011.0, 43)
    looping = Supervised("auth", RestartPolicy(crash_loop_restarts=0))
    looping.started(1000.0, 7)
    looping.exited(1001.0, 3, ["ImportError: no module named x"])
    console = Console(width=200, record=True, color_system=None)
    render_processes(console, Processes([sup.to_json(), looping.to_json()], live=True), now=1031.0)
    text = console.export_text()
    assert "memory" in text and "running" in text and "43" in text and "20s" in text
    assert "killed by SIGKILL (signal 9)" in text
    assert "crash-looping" in text and "exited with code 3" in text and "ImportError: no module named x" in text


# --- the container probe (deploy/probe.py), on real sockets and processes -------------------------


@pytest.mark.skipif(sys.platform != "linux", reason="/proc")
def test_probe_sees_an_established_connection_of_the_process_only() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        nats_url = f"nats://u:p@127.0.0.1:{port}"
        ok, why = probe.check("memory", live=False, http=None, nats_url=nats_url, pid=os.getpid())
        assert not ok and "not connected to NATS" in why
        ok, why = probe.check("memory", live=True, http=None, nats_url=nats_url, pid=os.getpid())
        assert not ok and "stuck" in why  # the bus is up and this process holds no connection
        with socket.create_connection(("127.0.0.1", port)):
            peer, _ = server.accept()
            with peer:
                assert probe.connected_to(os.getpid(), {port})
                assert not probe.connected_to(os.getpid(), {port + 1 if port < 65535 else port - 1})
                assert probe.check("memory", live=False, http=None, nats_url=nats_url, pid=os.getpid())[0]
                assert probe.check("memory", live=True, http=None, nats_url=nats_url, pid=os.getpid())[0]
    # NATS down (nothing listens any more): liveness does not blame the process
    ok, why = probe.check("memory", live=True, http=None, nats_url=nats_url, pid=os.getpid())
    assert ok and "unreachable" in why


@pytest.mark.skipif(sys.platform != "linux", reason="/proc")
def test_probe_finds_the_serve_process_of_its_service() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "serve", "memory"])
    try:
        deadline = time.monotonic() + 5
        while child.pid not in probe.service_pids("memory"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert child.pid not in probe.service_pids("auth")
    finally:
        child.kill()
        child.wait()
    assert probe.nats_endpoints("nats://a:b@nats-1:4223, nats://nats-2") == [("nats-1", 4223), ("nats-2", 4222)]
