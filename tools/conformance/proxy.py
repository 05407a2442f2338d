"""A test-only loopback proxy that adds ``Authorization: Bearer <key>`` to every request.

The official MCP conformance suite has no option for an auth header, and Engram answers nothing
without a credential; this proxy sits between the two for the conformance run only (run.py). It
forwards everything else as it came: the method, the path and query, every header (``Host`` and
``Origin`` too, so the gateway's DNS-rebinding checks see what the suite sent), the body, and the
answer streamed back as it arrives (Server-Sent Events included). It listens on 127.0.0.1 only.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

#: headers a hop rewrites itself (the body is streamed, its length and encoding are the upstream's own)
HOP_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})


def auth_proxy(upstream: str, key: str) -> Starlette:
    """An ASGI app forwarding to ``upstream`` (``http://127.0.0.1:PORT``) with the bearer ``key``."""
    client = httpx.AsyncClient(timeout=None)

    async def forward(request: Request) -> StreamingResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS | {"authorization"}}
        headers["authorization"] = f"Bearer {key}"
        url = upstream + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        sent = client.build_request(request.method, url, headers=headers, content=await request.body())
        answer = await client.send(sent, stream=True)

        async def body() -> Any:
            try:
                async for chunk in answer.aiter_raw():
                    yield chunk
            finally:
                await answer.aclose()

        kept = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_HEADERS}
        return StreamingResponse(body(), status_code=answer.status_code, headers=kept)

    return Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST", "DELETE", "PUT", "PATCH"])])


class ProxyThread:
    """The proxy served by uvicorn in a thread of this process, on a free loopback port."""

    def __init__(self, upstream: str, key: str) -> None:
        config = uvicorn.Config(auth_proxy(upstream, key), host="127.0.0.1", port=0, log_level="warning",
                                lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="conformance-auth-proxy", daemon=True)

    def start(self, timeout: float = 30.0) -> str:
        """Start serving; the proxy's base URL."""
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the auth proxy did not start")
            time.sleep(0.05)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
