"""Faults on one supervised stack (embedded NATS and Postgres, every service a process):

* kill -9 of each service mid-ingest (gateway, auth, memory, extractor — and graph once it runs in
  the stack), ENGRAM_FAULT_TRIALS times each (default 5: ≥ 20 trials in all);
* Postgres stopped mid-ingest for a few seconds, then started again: the services wait and recover
  by themselves;
* a poison message among the commands: dead-lettered, the rest flows on, `engram dlq` lists, shows
  and re-drives it;
* finally the read models equal a replay (the memory service's Postgres digest and vector index).

After each fault every acknowledged write is checked against Postgres and the event log: 0 lost
(not in the read model or never appended), 0 duplicated (two rows or two creations of one
content). Figures go to stdout and, as JSON lines, to $ENGRAM_FAULTS_OUT (docs/reliability.md).
The `ci` cases (one memory kill, Postgres, poison, replay) run in the normal suite.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fault_harness import (
    BOUND_S,
    fault_stack,
    ingest_through,
    ledger,
    record,
    replay_matches,
    stop_stack,
    wait_back,
)

from contracts.subjects import MEMORY, Names
from deploy.stack import SERVICES, Stack
from deploy.supervisor import RUNNING
from kit.bus import Bus

pytestmark = [pytest.mark.faults, pytest.mark.skipif(sys.platform != "linux", reason="process handling is Linux-only")]

ROOT = Path(__file__).resolve().parents[2]
KILLED = [c for c in ("gateway", "auth", "memory", "graph") if c in SERVICES]


def trials(request: pytest.FixtureRequest) -> int:
    """ENGRAM_FAULT_TRIALS, else 5 under `make faults` and 1 in the normal suite's subset."""
    if os.environ.get("ENGRAM_FAULT_TRIALS"):
        return int(os.environ["ENGRAM_FAULT_TRIALS"])
    return 1 if "ci" in (request.config.getoption("markexpr") or "") else 5


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = fault_stack(tmp_path_factory.mktemp("faults") / "home")
    try:
        yield s
    finally:
        stop_stack(s)


@pytest.fixture(scope="module")
def client(stack: Stack) -> tuple[str, str]:
    """(API key, its user id)."""
    made = stack.create_key(None, "faults", ["memory:read", "memory:write", "memory:maintenance"])
    return str(made["key"]), str(made["view"]["user_id"])


def check(stack: Stack, tenant: str, case: str, ingest, extra: dict[str, float] | None = None) -> None:  # type: ignore[no-untyped-def]
    found = ledger(stack, tenant, ingest)
    record(case, {"writes": len(found.expected), "lost": len(found.lost), "duplicated": len(found.duplicated),
                  "recovery_s": round(ingest.back_at - ingest.fault_at, 2),
                  "first_write_s": round(ingest.first_write_s, 2), "longest_wait_s": round(ingest.longest_wait_s, 2),
                  **(extra or {})})
    assert not found.lost, f"lost {len(found.lost)}: {found.lost[:5]} (rows {found.rows}, created {found.created})"
    assert not found.duplicated, f"duplicated: {found.duplicated[:5]}"
    for name, sup in stack.supervised.items():
        assert sup.state == RUNNING, (name, sup.to_json())


@pytest.mark.parametrize("component", [pytest.param(c, marks=[pytest.mark.ci] if c == "memory" else [])
                                       for c in KILLED])
def test_kill_9_mid_ingest(stack: Stack, client: tuple[str, str], component: str,
                           request: pytest.FixtureRequest) -> None:
    key, tenant = client
    for trial in range(trials(request)):
        def kill() -> float:
            sup = stack.supervised[component]
            restarts, pid = sup.restarts, sup.pid
            assert pid, sup.to_json()
            killed = time.time()
            os.kill(pid, signal.SIGKILL)
            return wait_back(stack, component, restarts, killed + BOUND_S)

        marker = f"kill{component}{trial}x{uuid.uuid4().hex[:6]}"
        check(stack, tenant, f"kill -9 {component} #{trial + 1}", ingest_through(stack, key, marker, kill))


def test_kill_9_of_the_extractor_mid_ingest(stack: Stack, client: tuple[str, str],
                                            request: pytest.FixtureRequest) -> None:
    """Daily logs saved before, while and after the extractor is killed: each processed once,
    its fact extracted once."""
    key, _ = client
    headers = {"Authorization": f"Bearer {key}"}
    for trial in range(trials(request)):
        marker = f"killx{trial}x{uuid.uuid4().hex[:6]}"
        saved: list[str] = []

        def save(i: int, marker: str = marker, saved: list[str] = saved) -> None:
            turns = [{"speaker": "user", "text": f"I work as a {marker}{i} engineer."},
                     {"speaker": "assistant", "text": "Nice."}]
            body = {"log_date": "2025-03-01", "project": f"{marker}p{i}", "turns": turns}
            deadline = time.time() + BOUND_S
            while True:  # the same key on a failure: saved once
                try:
                    r = httpx.post(stack.gateway_url + "/v1/daily-logs", json=body, timeout=30,
                                   headers={**headers, "Idempotency-Key": f"{marker}-{i}"})
                    if r.status_code in (200, 201, 202):
                        saved.append(r.json().get("id") or "")
                        return
                except httpx.HTTPError:
                    pass
                assert time.time() < deadline
                time.sleep(0.3)

        for i in range(3):
            save(i)
        sup = stack.supervised["extractor"]
        restarts = sup.restarts
        killed = time.time()
        os.kill(sup.pid, signal.SIGKILL)
        for i in range(3, 6):
            save(i)
        back = wait_back(stack, "extractor", restarts, killed + BOUND_S)
        for i in range(6, 8):
            save(i)
        deadline = time.time() + 2 * BOUND_S
        while True:
            states = [httpx.get(f"{stack.gateway_url}/v1/daily-logs/{log_id}", headers=headers, timeout=30).json()
                      for log_id in saved]
            done = [st.get("found") and st["log"]["processing_status"] == "processed" for st in states]
            if all(done) or time.time() > deadline:
                break
            time.sleep(0.5)
        processed = time.time()
        r = httpx.get(stack.gateway_url + "/v1/memories", params={"keyword": marker, "limit": 100},
                      headers=headers, timeout=30)
        facts = [m["content"] for m in r.json()["memories"]]
        per_log = [len([c for c in facts if f"{marker}{i} " in c]) for i in range(8)]
        record(f"kill -9 extractor #{trial + 1}", {
            "logs": len(saved), "lost": sum(1 for n in per_log if n == 0) + sum(1 for d in done if not d),
            "duplicated": sum(1 for n in per_log if n > 1), "recovery_s": round(back - killed, 2),
            "all_processed_s": round(processed - killed, 2)})
        assert all(done), [st.get("log", {}).get("processing_status") for st in states]
        assert per_log == [1] * 8, per_log


@pytest.mark.ci
def test_postgres_stopped_and_started_mid_ingest(stack: Stack, client: tuple[str, str]) -> None:
    """Postgres goes away for a few seconds (a clean stop, as for maintenance, not a crash the
    supervisor would restart at once); the services wait and recover by themselves."""
    key, tenant = client
    pg = stack._children["postgres"]

    def outage() -> float:
        with stack._lock:
            pg.stopped_on_purpose = True  # type: ignore[attr-defined]
            pg.server.stop(timeout=30)
        time.sleep(5.0)  # clients keep writing into the outage
        with stack._lock:
            pg.server.start()
            pg.stopped_on_purpose = False  # type: ignore[attr-defined]
            stack.supervised["postgres"].started(time.time(), pg.pid)
        return time.time()

    marker = f"pgstop{uuid.uuid4().hex[:6]}"
    ingest = ingest_through(stack, key, marker, outage)
    check(stack, tenant, "Postgres stopped 5 s and started", ingest,
          {"queued": float(sum(1 for w in ingest.writes if w.status == 202))})


def engram(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env |= {"ENGRAM_HOME": str(stack.o.home), "ENGRAM_NATS_URL": stack.nats_url or "",
            "ENGRAM_NAMESPACE": stack.o.namespace}
    return subprocess.run([sys.executable, "-m", "deploy", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.mark.ci
def test_a_poison_message_is_dead_lettered_and_the_rest_flows(stack: Stack, client: tuple[str, str]) -> None:
    key, tenant = client
    names = Names(stack.o.namespace)
    token = uuid.uuid4().hex
    poison = b'{"command_id": "poison", "type": "save_memory", "payload": ' + token.encode()  # cut short

    async def publish() -> None:
        bus = await Bus.connect(stack.nats_url, names, name="faults-poison")
        try:
            await bus.js.publish(names.command(MEMORY, "save_memory"), poison)
        finally:
            await bus.close()

    def inject() -> float:
        asyncio.run(publish())
        return time.time()

    before = {json.loads(line)["id"] for line in engram(stack, "dlq", "list", "--json").stdout.splitlines()}
    check(stack, tenant, "poison message", ingest_through(stack, key, f"poison{uuid.uuid4().hex[:6]}", inject))
    listed = engram(stack, "dlq", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    dead = [d for d in (json.loads(line) for line in listed.stdout.splitlines()) if d["id"] not in before]
    assert len(dead) == 1 and dead[0]["consumer"] == "memory-commands", dead
    shown = engram(stack, "dlq", "show", str(dead[0]["id"]))
    assert shown.returncode == 0 and token in json.loads(shown.stdout)["message"], shown.stdout + shown.stderr
    redriven = engram(stack, "dlq", "redrive", str(dead[0]["id"]))
    assert redriven.returncode == 0, redriven.stdout + redriven.stderr
    # it is still poison: dead-lettered again, under a new id, and only once
    deadline = time.time() + BOUND_S
    while True:
        now = [json.loads(line) for line in engram(stack, "dlq", "list", "--json").stdout.splitlines()]
        again = [d for d in now if d["id"] not in before]
        if again and again[0]["id"] != dead[0]["id"] or time.time() > deadline:
            break
        time.sleep(0.5)
    assert len(again) == 1 and again[0]["id"] > dead[0]["id"], again


@pytest.mark.ci
def test_the_read_models_equal_a_replay(stack: Stack, client: tuple[str, str]) -> None:
    """After every fault above: rebuilding the memory service's read models from the event log
    gives the same Postgres rows (digest), as many points in the vector index as active rows, and
    finds every point already what the log says (its fingerprint that of its memory's latest event:
    nothing to write, nothing to sweep)."""
    _, tenant = client
    result = replay_matches(stack, tenant)
    digest, active, points = result["before"]
    record("replay after the faults", {"events": result["events"], "active": active, "points_before": points,
                                       "points_after": result["after"][2], "identical": result["before"] == result["after"],
                                       **result["points"]})
    assert active > 0 and points == active, result
    assert result["after"] == result["before"], result
    assert result["points"]["points_written"] == 0 and result["points"]["points_swept"] == 0, result
