"""Container probes for the services without a health endpoint of their own (memory, extractor) or whose
endpoint does not see the bus (auth): `python -m deploy.probe SERVICE [--live] [--http URL]`.

Standard library only (it runs every few seconds in each container). It looks for the process
running `serve SERVICE` in this container (its /proc) and for an ESTABLISHED TCP connection *of
that process* to a NATS port (the ports of ENGRAM_NATS_URL, default 4222; read from
/proc/<pid>/net/tcp{,6} and matched to the process's socket inodes), so the answer is about this
replica, not about the service as a whole:

* readiness (default): the service process runs and holds its NATS connection (nats-py reconnects
  by itself after a NATS restart; until then the replica takes no work). With ``--http URL`` that
  URL must also answer 2xx (auth: its OAuth server).
* liveness (``--live``): the process runs, and it holds its NATS connection *or* NATS cannot be
  reached from here either. A replica is only declared dead when the bus is up and the process is
  not connected to it (stuck); a NATS outage must not restart every replica.

Exit status 0 = healthy, 1 = not; one line on stdout says why (Docker and Kubernetes keep it).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

ESTABLISHED = "01"
DEFAULT_NATS_PORT = 4222


def nats_endpoints(url: str) -> list[tuple[str, int]]:
    """(host, port) of each server in a (comma-separated) NATS URL."""
    found = []
    for part in url.split(","):
        part = part.strip()
        if not part:
            continue
        parsed = urlparse(part if "://" in part else "nats://" + part)
        found.append((parsed.hostname or "127.0.0.1", parsed.port or DEFAULT_NATS_PORT))
    return found or [("127.0.0.1", DEFAULT_NATS_PORT)]


def service_pids(service: str, proc: Path = Path("/proc")) -> list[int]:
    """Processes whose command line runs `... serve SERVICE` (engram serve, python -m deploy serve)."""
    pids = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            continue
        if any(a == "serve" and argv[i + 1 : i + 2] == [service] for i, a in enumerate(argv)):
            pids.append(int(entry.name))
    return sorted(pids)


def socket_inodes(pid: int, proc: Path = Path("/proc")) -> set[str]:
    inodes = set()
    try:
        fds = list((proc / str(pid) / "fd").iterdir())
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def established_remote_ports(table: str) -> dict[str, int]:
    """Socket inode -> remote port of each ESTABLISHED connection in a /proc/net/tcp{,6} table."""
    found = {}
    for line in table.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 10 or cols[3] != ESTABLISHED:
            continue
        found[cols[9]] = int(cols[2].rsplit(":", 1)[1], 16)
    return found


def connected_to(pid: int, ports: set[int], proc: Path = Path("/proc")) -> bool:
    inodes = socket_inodes(pid, proc)
    for name in ("tcp", "tcp6"):
        try:
            table = (proc / str(pid) / "net" / name).read_text()
        except OSError:
            continue
        if any(inode in inodes and port in ports for inode, port in established_remote_ports(table).items()):
            return True
    return False


def reachable(endpoints: list[tuple[str, int]], timeout: float = 1.0) -> bool:
    for host, port in endpoints:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return True
        except OSError:
            continue
    return False


def check(service: str, *, live: bool, http: str | None, nats_url: str, pid: int | None = None) -> tuple[bool, str]:
    pids = [pid] if pid else service_pids(service)
    if not pids:
        return False, f"no `serve {service}` process runs here"
    endpoints = nats_endpoints(nats_url)
    ports = {port for _, port in endpoints}
    connected = [pid for pid in pids if connected_to(pid, ports)]
    if live:
        if connected:
            return True, f"{service} (pid {connected[0]}) is connected to NATS"
        if not reachable(endpoints):
            return True, f"{service} runs (pid {pids[0]}); NATS is unreachable from here too: not its fault"
        return False, f"{service} (pid {pids[0]}) holds no connection to NATS, which is up: stuck"
    if not connected:
        return False, f"{service} (pid {pids[0]}) is not connected to NATS (yet)"
    if http:
        try:
            with urllib.request.urlopen(http, timeout=3) as reply:  # noqa: S310 - a URL of our own manifest
                if not 200 <= reply.status < 300:
                    return False, f"{http} answered {reply.status}"
        except OSError as exc:
            return False, f"{http}: {exc}"
    return True, f"{service} (pid {connected[0]}) is connected to NATS" + (f" and {http} answers" if http else "")


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m deploy.probe", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("service", choices=["gateway", "auth", "memory", "extractor", "graph"])
    parser.add_argument("--live", action="store_true", help="liveness: fail only if NATS is up and the process is not connected")
    parser.add_argument("--http", help="readiness: this URL must also answer 2xx")
    parser.add_argument("--pid", type=int, help="check this process (default: the `serve SERVICE` processes here)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    ok, why = check(args.service, live=args.live, http=args.http, pid=args.pid,
                    nats_url=os.environ.get("ENGRAM_NATS_URL", f"nats://127.0.0.1:{DEFAULT_NATS_PORT}"))
    print(("ok: " if ok else "failing: ") + why, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
