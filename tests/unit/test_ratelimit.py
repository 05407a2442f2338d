"""Token-bucket arithmetic of the gateway's rate limits, without I/O."""

from __future__ import annotations

import pytest

from services.gateway.ratelimit import TokenBuckets

pytestmark = pytest.mark.unit


def test_burst_then_refill() -> None:
    buckets = TokenBuckets(per_minute=60, burst=3)
    assert [buckets.take("k", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = buckets.take("k", 0.0)
    assert wait == pytest.approx(1.0)
    assert buckets.take("k", 1.0) == 0.0


def test_keys_are_independent_and_bounded() -> None:
    buckets = TokenBuckets(per_minute=60, burst=1, max_keys=2)
    assert buckets.take("a", 0.0) == 0.0
    assert buckets.take("b", 0.0) == 0.0
    assert buckets.take("a", 0.0) > 0
    buckets.take("c", 0.0)
    assert buckets.take("b", 0.0) == 0.0  # "b" was evicted, so it starts with a full bucket


async def test_middleware_answers_429_with_retry_after() -> None:
    import httpx
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from services.gateway.ratelimit import RateLimitMiddleware

    async def ok(_):  # type: ignore[no-untyped-def]
        return PlainTextResponse("ok")

    inner = Starlette(routes=[Route("/v1/x", ok), Route("/healthz", ok)])
    limited = RateLimitMiddleware(inner, per_minute=60, burst=2, anonymous_per_minute=6)

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization"):
            token = AccessToken(token="t", client_id="c", scopes=[], subject="u1", claims={"key_id": "k1"})
            scope["user"] = AuthenticatedUser(token)
        await limited(scope, receive, send)

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        keyed = [await client.get("/v1/x", headers={"Authorization": "Bearer x"}) for _ in range(3)]
        assert [r.status_code for r in keyed] == [200, 200, 429]
        assert int(keyed[2].headers["retry-after"]) >= 1 and keyed[2].json()["error"]["code"] == "rate_limited"
        health = [(await client.get("/healthz")).status_code for _ in range(5)]
        assert health == [200] * 5
        anonymous = [await client.get("/v1/x") for _ in range(2)]
        assert [r.status_code for r in anonymous] == [200, 429]
