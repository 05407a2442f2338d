"""A bulk save over REST costs one token of the credential's bucket, however many memories (and
bytes) it carries; the same body elsewhere is weighted by its size."""

from __future__ import annotations

import httpx
import pytest
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from contracts.portability import MAX_BULK_MEMORIES
from services.gateway.ratelimit import RateLimitMiddleware

pytestmark = pytest.mark.unit


async def test_a_bulk_request_is_one_request() -> None:
    async def ok(_):  # type: ignore[no-untyped-def]
        return PlainTextResponse("ok")

    inner = Starlette(routes=[Route("/v1/memories/bulk", ok, methods=["POST"]), Route("/v1/memories", ok, methods=["POST"])])
    limited = RateLimitMiddleware(inner, per_minute=60, burst=3, anonymous_per_minute=6)

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        key_id = dict(scope["headers"]).get(b"x-key", b"k1").decode()
        token = AccessToken(token="t", client_id="c", scopes=[], subject="u1", claims={"key_id": key_id})
        scope["user"] = AuthenticatedUser(token)
        await limited(scope, receive, send)

    body = {"memories": [{"content": "a fact worth keeping, " * 4}] * MAX_BULK_MEMORIES}  # ~50 kB
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        bulk = [(await client.post("/v1/memories/bulk", json=body)).status_code for _ in range(4)]
        assert bulk == [200, 200, 200, 429]  # one token each: the burst of 3, then refused
        weighted = [(await client.post("/v1/memories", json=body, headers={"x-key": "k2"})).status_code
                    for _ in range(2)]  # a fresh bucket of 3
        assert weighted == [200, 429]  # elsewhere the same body costs one token per 10 kB: the first empties it
