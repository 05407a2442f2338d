"""The gateway's edge limits.

* **Rate limits**: a token bucket for each API key / OAuth grant, and one per client address for
  every request whose bearer token is not already known to be valid. The address bucket is taken
  *before* authentication, so guessing tokens costs the guesser, not the auth service (a valid token
  that the gateway has cached is never charged there). A request costs one token plus one per
  started ``bytes_per_token`` (10 kB) of body beyond the first: a 200,000-character save costs 21.
  A bulk save over REST (``ONE_REQUEST_PATHS``) costs one, whatever it carries.
  Over the limit: 429 with Retry-After; on ``POST /mcp`` the body is a JSON-RPC error the `mcp`
  clients surface (code -32000, ``data: {retry_after, limit, cost}``). Buckets live in each
  gateway replica's memory, so N replicas allow up to N× the rate in total — fine for abuse
  protection; a cluster-wide quota would need shared state.
* **Client address**: the socket peer, unless the peer is a configured trusted proxy; then the
  nearest untrusted address of ``X-Forwarded-For`` (:class:`TrustedProxies`). IPv6 clients are
  counted per /64.
* **Slow headers**: a connection must deliver a request's headers within a deadline, or it is
  answered 408 and closed (:func:`header_deadline_protocol`; uvicorn has no such timeout).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kit.edge import (  # noqa: F401  (re-exported: the gateway's edge is kit's)
    RATE_LEFT,
    ClientAddressMiddleware,
    TokenBuckets,
    TrustedProxies,
    address_key,
    header_deadline_protocol,
)

log = logging.getLogger("engram.gateway.edge")

EXEMPT_PATHS = ("/healthz", "/readyz")
BYTES_PER_TOKEN = 10_000
RATE_LIMITED_JSONRPC_CODE = -32000  # JSON-RPC "server error" range: implementation-defined
MAX_ID_PEEK_BYTES = 64 * 1024  # a rate-limited MCP request's body is read this far to echo its id
CHARGED = "engram.address_charged"  # scope key: the pre-auth stage already charged this address
#: Bulk routes: one request costs one token however many memories it carries (issue 17). Over MCP a
#: `save_memories` call is one request too, weighted by its body like every MCP call (the gateway does
#: not read JSON-RPC bodies before authentication): 500 short memories, ~60 kB, cost 6 tokens, not 500.
ONE_REQUEST_PATHS = frozenset({"/v1/memories/bulk"})


def request_cost(body_bytes: int | None, bytes_per_token: int = BYTES_PER_TOKEN) -> int:
    """One token, plus one per started ``bytes_per_token`` of body beyond the first."""
    if not body_bytes or body_bytes <= bytes_per_token:
        return 1
    return 1 + math.ceil((body_bytes - bytes_per_token) / bytes_per_token)


class RateLimits:
    """The buckets both stages share."""

    def __init__(self, per_minute: float, burst: int, anonymous_per_minute: float,
                 bytes_per_token: int = BYTES_PER_TOKEN) -> None:
        self.authenticated = TokenBuckets(per_minute, burst)
        self.anonymous = TokenBuckets(anonymous_per_minute, max(1, int(anonymous_per_minute // 6)))
        self.bytes_per_token = bytes_per_token


def _exempt(scope: Scope) -> bool:
    return scope["type"] != "http" or scope.get("path", "").startswith(EXEMPT_PATHS)


def _address_key(scope: Scope) -> str:
    return address_key((scope.get("client") or (None, 0))[0])


def _content_length(scope: Scope) -> int | None:
    for k, v in scope.get("headers") or []:
        if k == b"content-length":
            try:
                return int(v)
            except ValueError:
                return None
    return None


def _limit_text(per_minute: float) -> str:
    return f"{per_minute:g}"


async def refuse(scope: Scope, receive: Receive, send: Send, *, wait: float, per_minute: float, who: str,
                 cost: int = 1, bytes_per_token: int = BYTES_PER_TOKEN) -> None:
    """429 with Retry-After. ``POST /mcp`` gets a JSON-RPC error (with the request's id) that MCP
    clients surface to the caller; everything else the REST error body."""
    retry_after = max(1, math.ceil(wait))
    headers = [(b"content-type", b"application/json"), (b"retry-after", str(retry_after).encode())]
    if scope.get("method") == "POST" and scope.get("path", "").rstrip("/") == "/mcp":
        message = f"rate limit exceeded: {_limit_text(per_minute)} requests per minute for this {who}"
        if cost > 1:
            message += f" (this request counts as {cost}: one more per {bytes_per_token:,} bytes of body beyond the first)"
        body = json.dumps({"jsonrpc": "2.0", "id": await _jsonrpc_id(scope, receive), "error": {
            "code": RATE_LIMITED_JSONRPC_CODE,
            "message": f"{message}; retry after {retry_after} s",
            "data": {"retry_after": retry_after, "limit": int(per_minute) if float(per_minute).is_integer() else per_minute,
                     "cost": cost, "reason": "rate_limited"},
        }}).encode()
    else:
        body = json.dumps({"error": {
            "code": "rate_limited",
            "message": f"too many requests for this {who}; retry after {retry_after}s",
            "field": None,
        }}).encode()
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _jsonrpc_id(scope: Scope, receive: Receive) -> Any:
    """The id of a (small) JSON-RPC request body, or None."""
    length = _content_length(scope)
    if length is not None and length > MAX_ID_PEEK_BYTES:
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_ID_PEEK_BYTES:
            return None
        if not message.get("more_body", False):
            break
    try:
        parsed = json.loads(b"".join(chunks))
    except (ValueError, RecursionError):  # not JSON, or nested too deep to parse
        return None
    request_id = parsed.get("id") if isinstance(parsed, dict) else None
    return request_id if isinstance(request_id, (str, int)) and not isinstance(request_id, bool) else None


class PreAuthLimitMiddleware:
    """Runs *before* authentication: a request whose bearer token the gateway does not hold as
    valid (no token, an unknown, invalid or not yet cached one) takes a token from its address's
    bucket, so a flood of guessed tokens is refused before any of them is introspected."""

    def __init__(self, app: ASGIApp, limits: RateLimits, known_valid: Callable[[Scope], bool]) -> None:
        self.app = app
        self.limits = limits
        self.known_valid = known_valid

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if _exempt(scope) or self.known_valid(scope):
            await self.app(scope, receive, send)
            return
        wait = self.limits.anonymous.take(_address_key(scope), time.monotonic())
        if wait > 0:
            await refuse(scope, receive, send, wait=wait, per_minute=self.limits.anonymous.per_minute,
                         who="address without a valid credential")
            return
        scope[CHARGED] = True
        await self.app(scope, receive, send)


class RateLimitMiddleware:
    """Runs after authentication (reads ``scope['user']``): the credential's bucket, weighted by
    body size (announced by Content-Length up front; a chunked body is counted as it arrives and
    charged when the request ends)."""

    def __init__(self, app: ASGIApp, per_minute: float | None = None, burst: int | None = None,
                 anonymous_per_minute: float | None = None, limits: RateLimits | None = None) -> None:
        self.app = app
        if limits is None:
            assert per_minute is not None and burst is not None and anonymous_per_minute is not None
            limits = RateLimits(per_minute, burst, anonymous_per_minute)
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if _exempt(scope):
            await self.app(scope, receive, send)
            return
        user = scope.get("user")
        now = time.monotonic()
        if not isinstance(user, AuthenticatedUser):
            if scope.get(CHARGED):
                await self.app(scope, receive, send)
                return
            wait = self.limits.anonymous.take(_address_key(scope), now)
            if wait > 0:
                await refuse(scope, receive, send, wait=wait, per_minute=self.limits.anonymous.per_minute,
                             who="address without a valid credential")
                return
            await self.app(scope, receive, send)
            return
        claims = user.access_token.claims or {}
        key = f"cred:{claims.get('key_id') or user.access_token.client_id}:{user.access_token.subject}"
        announced = _content_length(scope)
        cost = request_cost(announced, self.limits.bytes_per_token)
        if scope.get("path", "").rstrip("/") in ONE_REQUEST_PATHS:
            announced, cost = 0, 1  # a bulk save is one request, whatever its size (the body limit bounds it)
        buckets = self.limits.authenticated
        wait = buckets.take(key, now, cost)
        if wait > 0:
            await refuse(scope, receive, send, wait=wait, per_minute=buckets.per_minute, who="credential", cost=cost,
                         bytes_per_token=self.limits.bytes_per_token)
            return
        scope[RATE_LEFT] = (buckets.left(key), buckets.burst, buckets.per_minute)
        if announced is not None:
            await self.app(scope, receive, send)
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
            return message

        try:
            await self.app(scope, counting_receive, send)
        finally:
            buckets.charge(key, time.monotonic(), request_cost(received, self.limits.bytes_per_token) - cost)


