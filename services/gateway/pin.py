"""The per-connection project pin: header `X-Engram-Project` (or `x-sm-project`, the AI-memory
design's name for it). When present, every read and write of the request works in that project and
the tools no longer offer a `containerTag` parameter. Both headers at once must agree."""

from __future__ import annotations

import contextvars
import json
import re

from starlette.types import ASGIApp, Receive, Scope, Send

from contracts.memory import PROJECT_PATTERN

PIN_HEADER = "x-engram-project"
#: the same pin under the AI-memory (Supermemory-style) design's header
PIN_HEADER_ALIAS = "x-sm-project"
pinned_project: contextvars.ContextVar[str | None] = contextvars.ContextVar("engram_pinned_project", default=None)


class PinMiddleware:
    """Reads and validates the pin header; a malformed pin is a 400 naming the header and the rule."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        given = {name: raw.decode("latin-1").strip() for name in (PIN_HEADER, PIN_HEADER_ALIAS)
                 if (raw := headers.get(name.encode())) is not None}
        if not given:
            await self.app(scope, receive, send)
            return
        problem = next((f"{name} must be 1-128 chars of [A-Za-z0-9_.:-]" for name, value in given.items()
                        if not re.fullmatch(PROJECT_PATTERN, value)), None)
        if problem is None and len(set(given.values())) > 1:
            problem = f"{PIN_HEADER} and {PIN_HEADER_ALIAS} name different projects: give one"
        value = next(iter(given.values()))
        if problem is not None:
            body = json.dumps({"error": {
                "code": "invalid_argument", "field": "X-Engram-Project", "message": problem,
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
