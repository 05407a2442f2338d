"""The per-connection project pin: header `X-Engram-Project`. When present, every read and write
of the request works in that project and the tools no longer offer a `containerTag` parameter."""

from __future__ import annotations

import contextvars
import json
import re

from starlette.types import ASGIApp, Receive, Scope, Send

from contracts.memory import PROJECT_PATTERN

PIN_HEADER = "x-engram-project"
pinned_project: contextvars.ContextVar[str | None] = contextvars.ContextVar("engram_pinned_project", default=None)


class PinMiddleware:
    """Reads and validates the pin header; a malformed pin is a 400 naming the header and the rule."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = dict(scope.get("headers") or []).get(PIN_HEADER.encode())
        if raw is None:
            await self.app(scope, receive, send)
            return
        value = raw.decode("latin-1").strip()
        if not re.fullmatch(PROJECT_PATTERN, value):
            body = json.dumps({"error": {
                "code": "invalid_argument", "field": "X-Engram-Project",
                "message": "X-Engram-Project must be 1-128 chars of [A-Za-z0-9_.:-]",
            }}).encode()
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        token = pinned_project.set(value)
        try:
            await self.app(scope, receive, send)
        finally:
            pinned_project.reset(token)
