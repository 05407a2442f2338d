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


# --- cost weights (issue 21 #13) -------------------------------------------------------------------

def test_a_request_costs_one_token_plus_one_per_10_kb_beyond_the_first() -> None:
    from services.gateway.ratelimit import request_cost

    assert [request_cost(n) for n in (None, 0, 1, 10_000)] == [1, 1, 1, 1]
    assert request_cost(10_001) == 2 and request_cost(20_000) == 2 and request_cost(20_001) == 3
    assert request_cost(200_100) == 21  # a 200,000-character save
    assert request_cost(4 * 1024 * 1024) == 420  # the largest body accepted
    assert request_cost(2_500, bytes_per_token=1_000) == 3


def test_an_expensive_request_needs_at_most_a_full_bucket_and_leaves_a_debt() -> None:
    buckets = TokenBuckets(per_minute=60, burst=10)
    assert buckets.take("k", 0.0, cost=21) == 0.0  # a full bucket lets it in ...
    assert buckets.take("k", 0.0) == pytest.approx(12.0)  # ... and the 11-token debt is waited out
    assert buckets.take("k", 11.9) > 0
    assert buckets.take("k", 12.0) == 0.0
    partial = TokenBuckets(per_minute=60, burst=10)
    assert [partial.take("k", 0.0) for _ in range(5)] == [0.0] * 5
    assert partial.take("k", 0.0, cost=21) == pytest.approx(5.0)  # needs the full bucket (10), has 5


def test_a_charge_after_the_fact_goes_into_debt() -> None:
    buckets = TokenBuckets(per_minute=60, burst=5)
    assert buckets.take("k", 0.0) == 0.0
    buckets.charge("k", 0.0, 20)
    assert buckets.take("k", 0.0) == pytest.approx(17.0)


# --- client address behind proxies (issue 21 #8) -----------------------------------------------------

def test_forwarded_for_is_ignored_unless_the_peer_is_a_configured_proxy() -> None:
    from services.gateway.ratelimit import TrustedProxies

    nobody = TrustedProxies("")
    assert not nobody and nobody.client("127.0.0.1", ["203.0.113.9"]) == "127.0.0.1"
    proxy = TrustedProxies("127.0.0.1, 10.0.0.0/8")
    assert proxy.client("192.0.2.50", ["203.0.113.9"]) == "192.0.2.50"  # not a proxy: its claim is ignored
    assert proxy.client("127.0.0.1", ["203.0.113.9"]) == "203.0.113.9"
    assert proxy.client("127.0.0.1", ["203.0.113.9, 10.1.2.3"]) == "203.0.113.9"  # a chain of our proxies
    # the client's own X-Forwarded-For entry is left of the one our proxy appended: never believed
    assert proxy.client("127.0.0.1", ["198.51.100.1, 203.0.113.9"]) == "203.0.113.9"
    assert proxy.client("127.0.0.1", ["198.51.100.1", "203.0.113.9"]) == "203.0.113.9"  # two header lines
    assert proxy.client("127.0.0.1", ["203.0.113.9:5123"]) == "203.0.113.9"
    assert proxy.client("127.0.0.1", ["garbage, 10.0.0.2"]) == "10.0.0.2"  # stops at the proxy that wrote it
    assert proxy.client("127.0.0.1", []) == "127.0.0.1"
    assert TrustedProxies("::1").client("::1", ["[2001:db8::7]:443"]) == "2001:db8::7"
    with pytest.raises(ValueError, match="ENGRAM_TRUSTED_PROXIES: 'localhost'"):
        TrustedProxies("localhost")


def test_ipv6_clients_share_a_bucket_per_64() -> None:
    from services.gateway.ratelimit import address_key

    assert address_key("2001:db8:1:2::1") == address_key("2001:db8:1:2:ffff::9") == "ip:2001:db8:1:2::/64"
    assert address_key("2001:db8:1:3::1") != address_key("2001:db8:1:2::1")
    assert address_key("203.0.113.9") == "ip:203.0.113.9" == address_key("::ffff:203.0.113.9")
    assert address_key(None) == "ip:unknown"


# --- the 429 an MCP client reads (issue 13 item 7a) and the pre-auth stage (issue 21 #9) -------------

async def test_a_rate_limited_mcp_post_is_a_jsonrpc_error_with_the_limit() -> None:
    import httpx
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from services.gateway.ratelimit import PreAuthLimitMiddleware, RateLimits

    async def ok(_):  # type: ignore[no-untyped-def]
        return PlainTextResponse("ok")

    limits = RateLimits(per_minute=60, burst=1, anonymous_per_minute=6)
    app = PreAuthLimitMiddleware(Starlette(routes=[Route("/mcp", ok, methods=["POST"]), Route("/v1/x", ok)]),
                                 limits, known_valid=lambda scope: dict(scope["headers"]).get(b"authorization") == b"Bearer good")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        assert (await client.post("/mcp", json={"jsonrpc": "2.0", "id": 7, "method": "ping"})).status_code == 200
        refused = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 8, "method": "ping"})
        rest = await client.get("/v1/x")
        known = [(await client.get("/v1/x", headers={"Authorization": "Bearer good"})).status_code for _ in range(5)]
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) == 10
    body = refused.json()
    assert body["id"] == 8 and body["error"]["code"] == -32000
    assert body["error"]["message"] == ("rate limit exceeded: 6 requests per minute for this address without a "
                                        "valid credential; retry after 10 s")
    assert body["error"]["data"]["retry_after"] == 10 and body["error"]["data"]["limit"] == 6
    assert rest.status_code == 429 and rest.json()["error"]["code"] == "rate_limited"
    assert known == [200] * 5  # a token known to be valid is not charged to its address
