"""Issue 20: the embedded stack heals itself.

An `engram up`-style Stack in a temporary home, with its own embedded NATS and Postgres (never the
machine's servers: only processes this test started are killed) and supervision running. For each
component - gateway, auth, memory, NATS, Postgres - two clients save memories over REST with
idempotency keys, retrying as documented (the same key on 5xx, 409 in flight, a timeout or a
refused connection, with backoff); the component is killed with SIGKILL; then:

* the supervisor restarts it (within 60 s) and the rest of the stack keeps running;
* writes go on, and every acknowledged (or queued: 202) write is in the read model exactly once;
* no write waited unboundedly (a generous 60 s bound: figures are recorded, not asserted).

Recovery figures (kill -> the component back; kill -> first successful write sent after the kill;
the longest a write waited) are printed, and written as JSON to $ENGRAM_RELIABILITY_OUT when set
(docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from deploy.stack import Stack, StackOptions
from deploy.supervisor import RUNNING, RestartPolicy

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(sys.platform != "linux", reason="process handling is Linux-only")]

TRIALS = int(os.environ.get("ENGRAM_SELF_HEALING_TRIALS", "1"))
BOUND_S = 60.0  # generous upper bounds only; the figures are recorded
RESULTS: dict[str, list[dict[str, float]]] = {}


@dataclass
class Write:
    key: str
    content: str
    first_sent: float
    acked_at: float | None = None
    sent_at: float = 0.0  # of the attempt that succeeded
    status: int | None = None
    attempts: int = 0


@dataclass
class Writer:
    """One client saving memories in a loop, retrying each with the same Idempotency-Key."""

    base_url: str
    key: str
    marker: str
    stop: threading.Event = field(default_factory=threading.Event)
    writes: list[Write] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(base_url=self.base_url, headers=headers, timeout=20) as client:
            n = 0
            while not self.stop.is_set():
                n += 1
                write = Write(key=str(uuid.uuid4()), content=f"{self.marker} note {n} {uuid.uuid4().hex[:8]}",
                              first_sent=time.time())
                self.writes.append(write)
                delay = 0.2
                while write.acked_at is None:
                    write.attempts += 1
                    write.sent_at = time.time()
                    try:
                        r = client.post("/v1/memories", json={"content": write.content},
                                        headers={"Idempotency-Key": write.key})
                    except httpx.HTTPError:
                        r = None
                    if r is not None and r.status_code in (200, 201, 202):
                        write.acked_at, write.status = time.time(), r.status_code
                        break
                    if r is not None and r.status_code not in (409, 429) and r.status_code < 500:
                        self.errors.append(f"{r.status_code} {r.text[:300]}")  # a client error: a bug
                        write.acked_at = None
                        self.writes.remove(write)
                        return
                    if time.time() - write.first_sent > 2 * BOUND_S:
                        self.errors.append(f"gave up on {write.content!r} after {write.attempts} attempts")
                        return
                    time.sleep(delay)
                    delay = min(2.0, delay * 2)
                time.sleep(0.05)

    def acked(self) -> list[Write]:
        return [w for w in self.writes if w.acked_at is not None]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("self-healing") / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    options = StackOptions(
        home=home, gateway_port=0, auth_port=0,  # NATS and Postgres: embedded (4222/5432, or free ports)
        extra_env={"ENGRAM_LOG_LEVEL": "INFO", "ENGRAM_RATE_LIMIT_PER_MINUTE": "100000",
                   "ENGRAM_RATE_LIMIT_BURST": "10000", "ENGRAM_ANONYMOUS_RATE_LIMIT_PER_MINUTE": "100000",
                   # a log in the hands of a killed extractor comes back after this (default 120 s)
                   "ENGRAM_EXTRACTOR_ACK_WAIT_S": "10"},
        restart_policy=RestartPolicy(initial_delay_s=0.2, max_delay_s=2.0, crash_loop_restarts=20),
    )
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # the services must not see the test harness's ENGRAM_TEST_* / ENGRAM_* settings
    s = Stack(options, say=lambda line: print(line, flush=True))
    try:
        s.start(timeout=300)
        s.supervise_in_background(0.1)
        yield s
    finally:
        os.environ.clear()
        os.environ.update(saved)
        s.stop()
        _report()


@pytest.fixture(scope="module")
def api_key(stack: Stack) -> str:
    return str(stack.create_key(None, "self-healing")["key"])


def _report() -> None:
    if not RESULTS:
        return
    lines = ["component   trials  back (med/max s)  first write (med/max s)  longest wait (s)  queued  lost  dup"]
    for name, trials in RESULTS.items():
        def col(key: str, trials: list[dict[str, float]] = trials) -> str:
            values = [t[key] for t in trials]
            return f"{statistics.median(values):.2f}/{max(values):.2f}"
        lines.append(f"{name:<11} {len(trials):>6}  {col('back_s'):>16}  {col('first_write_s'):>23}  "
                     f"{max(t['longest_wait_s'] for t in trials):>16.2f}  {sum(t['queued'] for t in trials):>6.0f}  "
                     f"{sum(t['lost'] for t in trials):>4.0f}  "
                     f"{sum(t['duplicated'] for t in trials):>3.0f}")
    print("\n" + "\n".join(lines), flush=True)
    out = os.environ.get("ENGRAM_RELIABILITY_OUT")
    if out:
        Path(out).write_text(json.dumps({"machine": os.uname().nodename, "cpus": os.cpu_count(),
                                         "date": time.strftime("%Y-%m-%d"), "results": RESULTS}, indent=2))


def _listed(stack: Stack, key: str, marker: str) -> list[str]:
    """The memories listed with ``marker``; a 503 (a restarted memory service still loading its
    models, while writes are already accepted as queued) is asked again within the bound."""
    deadline = time.time() + BOUND_S
    while True:
        r = httpx.get(stack.gateway_url + "/v1/memories", params={"keyword": marker, "limit": 100},
                      headers={"Authorization": f"Bearer {key}"}, timeout=30)
        if r.status_code != 503 or time.time() > deadline:
            break
        time.sleep(0.5)
    r.raise_for_status()
    return [m["content"] for m in r.json()["memories"]]


def _wait_back(stack: Stack, name: str, restarts_before: int, deadline: float) -> float:
    sup = stack.supervised[name]
    while time.time() < deadline:
        if sup.state == RUNNING and sup.restarts > restarts_before and sup.started_at:
            return sup.started_at
        time.sleep(0.05)
    raise AssertionError(f"the {name} was not restarted within {BOUND_S:.0f} s: {sup.to_json()}")


def _auth_works_end_to_end(stack: Stack, marker: str) -> None:
    """A new key (auth writes to Postgres) is accepted by the gateway (auth reads it): every
    service, not only the write path the clients used, works after the restart."""
    deadline = time.time() + BOUND_S
    while True:
        try:
            fresh = str(stack.create_key(None, f"after {marker}")["key"])
            r = httpx.post(stack.gateway_url + "/v1/memories", json={"content": f"{marker} fresh key"},
                           headers={"Authorization": f"Bearer {fresh}", "Idempotency-Key": marker}, timeout=20)
            if r.status_code in (200, 201, 202):
                return
            problem = f"{r.status_code} {r.text[:200]}"
        except (RuntimeError, httpx.HTTPError) as exc:
            problem = str(exc)
        assert time.time() < deadline, f"a new key did not work after the restart: {problem}"
        time.sleep(0.5)


@pytest.mark.parametrize("component", ["memory", "gateway", "auth", "nats", "postgres"])
def test_kill_9_then_the_stack_heals(stack: Stack, api_key: str, component: str) -> None:
    assert component in stack.supervised, f"{component} is not supervised (not started by this stack?)"
    for trial in range(TRIALS):
        marker = f"heal{component}{trial}x{uuid.uuid4().hex[:6]}"
        writers = [Writer(stack.gateway_url, api_key, f"{marker} c{i}") for i in range(2)]
        threads = [threading.Thread(target=w.run, daemon=True) for w in writers]
        for t in threads:
            t.start()
        deadline = time.time() + BOUND_S
        while sum(len(w.acked()) for w in writers) < 4:
            assert time.time() < deadline, "no write succeeded before the kill"
            assert not any(w.errors for w in writers), [w.errors for w in writers]
            time.sleep(0.05)

        sup = stack.supervised[component]
        pid, restarts_before = sup.pid, sup.restarts
        assert pid, sup.to_json()
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)
        back_at = _wait_back(stack, component, restarts_before, killed_at + BOUND_S)

        # writes go on: at least 3 more acknowledged writes sent after the component came back
        deadline = time.time() + BOUND_S
        while sum(1 for w in writers for x in w.acked() if x.sent_at > back_at) < 3:
            assert time.time() < deadline, f"writes did not resume after the {component} came back"
            assert not any(w.errors for w in writers), [w.errors for w in writers]
            time.sleep(0.05)
        for w in writers:
            w.stop.set()
        for t in threads:
            t.join(timeout=2 * BOUND_S)
            assert not t.is_alive(), "a client is stuck"
        assert not any(w.errors for w in writers), [w.errors for w in writers]

        # everything else kept running, pid unchanged
        for name, other in stack.supervised.items():
            if name != component:
                assert other.state == RUNNING, other.to_json()

        acked = [x for w in writers for x in w.acked()]
        after = [x for x in acked if x.sent_at >= killed_at]
        first_write = min(x.acked_at for x in after if x.acked_at is not None) - killed_at
        longest = max(x.acked_at - x.first_sent for x in acked if x.acked_at is not None)
        assert longest < BOUND_S, f"a write waited {longest:.1f} s"

        # the read model: every acknowledged write exactly once (the projection may lag a moment)
        expected = sorted(x.content for x in acked)
        deadline = time.time() + BOUND_S
        while True:
            listed = sorted(_listed(stack, api_key, marker))
            missing = [c for c in expected if c not in listed]
            if not missing or time.time() > deadline:
                break
            time.sleep(0.5)
        duplicated = [c for c in set(listed) if listed.count(c) > 1]
        unexpected = [c for c in listed if c not in expected]
        # a write the client gave up on before an answer may exist (it was accepted): not an error
        given_up = {x.content for w in writers for x in w.writes if x.acked_at is None}
        assert not missing, f"lost {len(missing)} acknowledged writes: {missing[:5]}"
        assert not duplicated, f"duplicated: {duplicated[:5]}"
        assert set(unexpected) <= given_up, unexpected
        _auth_works_end_to_end(stack, marker)
        figures = {"back_s": back_at - killed_at, "first_write_s": first_write, "longest_wait_s": longest,
                   "writes": float(len(acked)), "queued": float(sum(1 for x in acked if x.status == 202)),
                   "lost": float(len(missing)), "duplicated": float(len(duplicated))}
        RESULTS.setdefault(component, []).append(figures)
        print(f"{component} trial {trial}: " + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()), flush=True)


def test_kill_9_of_the_extractor_loses_no_log_and_duplicates_nothing(stack: Stack) -> None:
    """Daily logs saved before, during and after a kill -9 of the extractor: every log ends up
    processed once, its facts extracted once (no duplicate memory), and the stack kept serving."""
    assert "extractor" in stack.supervised, "the extractor is not supervised by this stack"
    # reading a log's state is a maintenance route
    api_key = str(stack.create_key(None, "extractor-healing",
                                   ["memory:read", "memory:write", "memory:maintenance"])["key"])
    marker = "healx" + uuid.uuid4().hex[:6]
    headers = {"Authorization": f"Bearer {api_key}"}
    saved: list[str] = []

    def save(i: int) -> None:
        turns = [{"speaker": "user", "text": f"I work as a {marker}{i} engineer."},
                 {"speaker": "assistant", "text": "Nice."}]
        r = httpx.post(stack.gateway_url + "/v1/daily-logs", headers={**headers, "Idempotency-Key": f"{marker}-{i}"},
                       json={"log_date": "2025-03-01", "project": f"{marker}p{i}", "turns": turns}, timeout=30)
        assert r.status_code in (200, 201, 202), r.text
        saved.append(r.json().get("id") or "")

    for i in range(3):
        save(i)
    sup = stack.supervised["extractor"]
    restarts_before = sup.restarts
    killed_at = time.time()
    os.kill(sup.pid, signal.SIGKILL)
    for i in range(3, 8):  # saved while the extractor is down or restarting
        save(i)
    back_at = _wait_back(stack, "extractor", restarts_before, killed_at + BOUND_S)
    for i in range(8, 10):
        save(i)

    deadline = time.time() + 2 * BOUND_S  # ≥ the extractor's ack wait (10 s here) + the work
    while True:
        states = [httpx.get(f"{stack.gateway_url}/v1/daily-logs/{log_id}", headers=headers, timeout=30).json()
                  for log_id in saved]
        done = [st.get("found") and st["log"]["processing_status"] == "processed" for st in states]
        if all(done) or time.time() > deadline:
            break
        time.sleep(0.5)
    assert all(done), [st.get("log", {}).get("processing_status") for st in states]
    facts = _listed(stack, api_key, marker)
    for i in range(10):
        mine = [c for c in facts if f"{marker}{i} " in c]
        assert len(mine) == 1, (i, mine)  # extracted once, whatever the kill interrupted
    RESULTS.setdefault("extractor", []).append({
        "back_s": back_at - killed_at, "first_write_s": 0.0, "longest_wait_s": 0.0, "writes": 10.0,
        "queued": 0.0, "lost": 0.0, "duplicated": 0.0})
    print(f"extractor: back after {back_at - killed_at:.2f}s; 10 logs processed once each", flush=True)


def test_status_shows_the_restarts(stack: Stack) -> None:
    """`engram status` reads supervisor.json: each process, its state, restarts and last exit."""
    state = json.loads((stack.o.home / "supervisor.json").read_text())
    assert oct((stack.o.home / "supervisor.json").stat().st_mode & 0o777) == "0o600"
    by_name = {p["name"]: p for p in state["processes"]}
    assert set(by_name) == {"nats", "postgres", "auth", "memory", "extractor", "graph", "gateway"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env |= {"ENGRAM_HOME": str(stack.o.home), "ENGRAM_NATS_URL": stack.nats_url, "COLUMNS": "250"}
    out = subprocess.run([sys.executable, "-m", "deploy", "status"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Processes" in out.stdout and "memory" in out.stdout, out.stdout
    if RESULTS.get("memory"):
        assert by_name["memory"]["restarts"] >= 1 and "SIGKILL" in (by_name["memory"]["last_exit"] or "")
        assert "SIGKILL" in out.stdout, out.stdout
