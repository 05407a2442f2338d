"""The listening socket of an HTTP service, shared by its replicas on one machine when asked.

With ``ENGRAM_REUSE_PORT=1`` (set by ``engram up --replicas N``) each replica binds the same
address with ``SO_REUSEPORT``, and the kernel spreads new connections across them: one URL, N
processes, as a load balancer would in front of containers. Unset, the socket is bound as uvicorn
would bind it (a second process on the port is refused).
"""

from __future__ import annotations

import os
import socket


def reuse_port_requested() -> bool:
    return os.environ.get("ENGRAM_REUSE_PORT", "").strip().lower() in ("1", "true", "yes")


def bind(host: str, port: int, *, reuse_port: bool | None = None) -> socket.socket:
    """A listening TCP socket on (host, port); ``SO_REUSEPORT`` when requested (Linux, BSD)."""
    reuse_port = reuse_port_requested() if reuse_port is None else reuse_port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        if not hasattr(socket, "SO_REUSEPORT"):
            raise SystemExit("ENGRAM_REUSE_PORT=1 needs SO_REUSEPORT, which this platform lacks")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock
