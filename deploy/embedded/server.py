"""What both embedded servers share: the child process, its log handle, and the context manager."""

from __future__ import annotations

import os
import subprocess
from types import TracebackType
from typing import IO, Self


class ChildServer:
    """Bookkeeping of one server process started by this object.

    Subclasses provide ``start()`` and ``stop()`` (both with default timeouts).
    """

    _proc: subprocess.Popen[bytes] | None = None
    _log_fh: IO[bytes] | None = None
    strict_port = False
    """Whether ``start()`` must listen on ``preferred_port`` (a restart under `engram up`, whose
    services know that port) rather than fall back to a free one."""

    def exit_status(self) -> int | None:
        """The exit status if the server process exited on its own, else ``None``.

        The process is *not* reaped (``waitid`` with ``WNOWAIT``): while it is a zombie its
        process-group id stays ours, so ``stop()`` can still sweep what it left behind (PostgreSQL
        backends outlive a killed postmaster and hold its shared memory)."""
        proc = self._proc
        if proc is None:
            return None
        if proc.returncode is not None:
            return proc.returncode
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return proc.poll()
        if info is None:
            return None
        if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
            return -info.si_status
        return info.si_status

    @property
    def pid(self) -> int | None:
        """Process id of the running server, or ``None``."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def running(self) -> bool:
        """Whether the server process started by this object is alive."""
        return self._proc is not None and self._proc.poll() is None

    def _release(self) -> None:
        """Forget an exited process and close its log."""
        if self._proc is not None and self._proc.poll() is not None:
            self._proc = None
        if self._proc is None and self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None

    def __enter__(self) -> Self:
        self.start()  # type: ignore[attr-defined]
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()  # type: ignore[attr-defined]
