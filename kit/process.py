"""Child processes that never outlive their parent.

:func:`die_with_parent` is shared by the deployment layer (the embedded NATS and PostgreSQL, the
services `engram up` starts) and by a service's own helpers (the memory service's vector-shard
compaction), so it lives here rather than in either.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["die_with_parent"]

_PR_SET_PDEATHSIG = 1
_libc: object | None = None


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that asks Linux to send ``sig`` to the child when this process dies.

    The servers and services run in sessions of their own (a Ctrl-C in the terminal reaches only
    `engram up`, which stops them in order), so a parent killed without that chance (SIGKILL, an
    out-of-memory kill, a second signal mid-shutdown) would otherwise leave them running, holding
    ports, data folders and locks. The signal is set after ``Popen`` changed the child's user (a
    change of user clears it) and survives ``exec``; a parent that died before it was set is
    noticed (the child is then reparented) and the child exits at once. ``None`` off Linux.

    Linux ties the signal to the *thread* that started the child: a child started from a thread
    is signalled when that thread ends."""
    global _libc
    if not sys.platform.startswith("linux"):
        return None
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the child only calls it
    libc: Any = _libc
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request: no signal will come
            os._exit(1)

    return preexec
