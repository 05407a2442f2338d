"""Local resources of the embedded servers: free TCP ports, and their child processes.

The embedded servers prefer their well-known ports (4222 for NATS, 5432 for PostgreSQL) but
must never disturb a server that already listens there: :func:`pick_port` falls back to a port
the operating system hands out.

The process helpers (:func:`stop_process_group`, :func:`pid_is_alive`, :func:`process_name`,
`die_with_parent` from kit.process, :func:`stop_orphan`) are shared by the NATS and PostgreSQL launchers and
by `engram up`'s services (deploy/stack.py).
"""

from __future__ import annotations

import errno
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from deploy.embedded.errors import EmbeddedStartError
from kit.process import die_with_parent

__all__ = [
    "connect_host",
    "die_with_parent",
    "listen_port",
    "pick_port",
    "pid_is_alive",
    "port_is_free",
    "process_cmdline",
    "process_name",
    "process_parent",
    "stop_orphan",
    "stop_process_group",
    "tcp_accepts",
    "url_host",
]


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on ``host:port`` right now.

    Binds a probe socket the way the servers do (``SO_REUSEADDR``, so connections lingering in
    ``TIME_WAIT`` do not count as "taken"; a listening socket on the same address - or on the
    wildcard address - still does). The answer can be stale a moment later.
    """
    if not 0 < port < 65536:
        return False
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
            probe.listen(1)
        except OSError:
            return False
    return True


def pick_port(preferred: int | None, host: str = "127.0.0.1") -> int:
    """``preferred`` if it is free on ``host``, otherwise a free port the OS assigns.

    ``preferred=None`` (or ``0``): a free port drawn at random below the OS's ephemeral range
    (which outgoing connections use), else one the OS assigns. Between this call and the server
    binding the port another process could take it; the launchers report such a failure with the log.
    """
    if preferred and port_is_free(preferred, host):
        return preferred
    low, _ = _ephemeral_range()
    if low > _LISTEN_FLOOR + 1000:
        # below the ephemeral range: the OS hands those ports to outgoing connections (a service's
        # own connection to NATS or Postgres could take a port between this pick and its bind)
        for _ in range(50):
            port = random.randrange(_LISTEN_FLOOR, low)
            if port_is_free(port, host):
                return port
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


#: the lowest port :func:`pick_port` draws from (below: well-known and registered services)
_LISTEN_FLOOR = 20000


def _ephemeral_range() -> tuple[int, int]:
    """The ports the OS gives outgoing connections (Linux' ``ip_local_port_range``; else IANA's)."""
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 49152, 65535


def listen_port(preferred: int | None, host: str, *, strict: bool = False) -> int:
    """:func:`pick_port` for a launcher: an unusable ``host`` becomes an EmbeddedStartError.

    ``strict``: ``preferred`` or nothing (a restart must keep the port its clients know)."""
    if strict and preferred and not port_is_free(preferred, host):
        raise EmbeddedStartError(
            f"port {preferred} on {host} is taken (by what is left of the previous server, or another program)",
            hint="wait for it to be released; `ss -ltnp` shows who holds it.",
        )
    try:
        return pick_port(preferred, host)
    except OSError as exc:
        raise EmbeddedStartError(
            f"cannot listen on {host!r}: {exc}",
            hint="use 127.0.0.1 (the default) or an address of this machine.",
        ) from exc


def connect_host(host: str) -> str:
    """The address a client uses to reach a server bound to ``host`` (wildcards -> loopback)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def url_host(host: str) -> str:
    """``host`` as it appears in a URL (IPv6 literals in brackets)."""
    host = connect_host(host)
    return f"[{host}]" if ":" in host else host


def tcp_accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((connect_host(host), port), timeout=timeout):
            return True
    except OSError:
        return False


# --- processes ---------------------------------------------------------------------------------


def pid_is_alive(pid: int) -> bool:
    """Whether a process with this id exists (zombies included)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_name(pid: int) -> str | None:
    """The command name of ``pid`` (``/proc/<pid>/comm``), or ``None`` if unknown."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def process_cmdline(pid: int) -> list[str] | None:
    """The argument vector of ``pid`` (``/proc/<pid>/cmdline``), or ``None`` if unknown."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [arg.decode(errors="replace") for arg in raw.split(b"\0") if arg]


def process_parent(pid: int) -> int | None:
    """The parent pid of ``pid`` (``/proc/<pid>/stat``), or ``None`` if it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[1])


#: set by `engram up` (and any :class:`deploy.stack.Stack`) in the services it starts: its own pid
PARENT_PID_ENV = "ENGRAM_PARENT_PID"
#: how long an orphaned service's graceful stop may take before it is cut short
ORPHAN_GRACE_S = 30.0


def exit_when_orphaned(grace_s: float = ORPHAN_GRACE_S) -> None:
    """In a service that `engram up` started (:data:`PARENT_PID_ENV`): make sure it ends once that
    parent is gone, whatever its own stop is doing.

    The parent's death signal (:func:`die_with_parent`) asks for a graceful stop, and every service
    stops on it. But a stop can hang: found 2026-12-06, a gateway whose NATS had died with the same
    parent waited on the bus after its SIGTERM and was still running minutes later, orphaned. A
    daemon thread notices the parent is gone (the process was reparented) and ends the process
    ``grace_s`` later if it has not ended by itself. Nothing happens without the variable (a
    service run by systemd, a container runtime or a shell)."""
    raw = os.environ.get(PARENT_PID_ENV, "")
    if not raw.isdigit():
        return
    parent = int(raw)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        time.sleep(grace_s)
        sys.stderr.write(f"engram: the process that started this service ({parent}) is gone and the service "
                         f"did not stop within {grace_s:.0f} s of it: exiting\n")
        sys.stderr.flush()
        os._exit(1)

    import threading

    threading.Thread(target=watch, name="exit-when-orphaned", daemon=True).start()


def stop_orphan(pid: int, sig: int = signal.SIGTERM, timeout: float = 10.0) -> bool:
    """Stop a process that is not our child (a server left by an earlier run): ``sig``, then
    SIGKILL after ``timeout`` s. True once it is gone (a zombie counts as gone)."""
    for signum, wait in ((sig, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while process_parent(pid) is not None:
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        else:
            return True
    return process_parent(pid) is None


def _exited_unreaped(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait until ``proc`` has exited, without reaping it; ``False`` on timeout.

    While the exited child is not reaped its pid (and so its process-group id) cannot be reused,
    which makes the ``killpg`` that follows safe.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:  # reaped elsewhere: let Popen record it (returncode 0)
            proc.poll()
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    except OSError as exc:  # pragma: no cover - defensive
        if exc.errno != errno.ESRCH:
            raise


def stop_process_group(
    proc: subprocess.Popen[bytes],
    first_signal: int,
    timeout: float,
    escalate: Sequence[tuple[int, float]] = (),
) -> int:
    """Stop a server started with ``start_new_session=True`` and everything it spawned.

    Sends ``first_signal`` to the server, waits up to ``timeout`` seconds, then sends each
    ``(signal, seconds)`` of ``escalate`` to the whole process group, and finally ``SIGKILL``.
    Whatever is left in the group once the server has exited is killed too, so no child process
    survives. Returns the exit status. Safe to call on an already finished process.
    """
    if proc.returncode is None:
        steps: list[tuple[int, float, bool]] = [(first_signal, timeout, False)]
        steps += [(sig, secs, True) for sig, secs in escalate]
        for sig, secs, whole_group in steps:
            if _exited_unreaped(proc, 0):
                break
            if whole_group:
                _killpg(proc.pid, sig)
            else:
                try:
                    proc.send_signal(sig)
                except ProcessLookupError:
                    pass
            if _exited_unreaped(proc, secs):
                break
        else:
            _killpg(proc.pid, signal.SIGKILL)
            _exited_unreaped(proc, 10.0)
        if proc.returncode is None:
            # The leader is a zombie now, so the group id is still ours: sweep stragglers.
            _killpg(proc.pid, signal.SIGKILL)
    return proc.wait()
