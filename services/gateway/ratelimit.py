"""The gateway's edge limits.

* **Rate limits**: a token bucket for each API key / OAuth grant, and one per client address for
  every request whose bearer token is not already known to be valid. The address bucket is taken
  *before* authentication, so guessing tokens costs the guesser, not the auth service (a valid token
  that the gateway has cached is never charged there). A request costs one token plus one per
  started ``bytes_per_token`` (10 kB) of body beyond the first: a 200,000-character save costs 21.
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

import asyncio
import ipaddress
import json
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("engram.gateway.edge")

EXEMPT_PATHS = ("/healthz", "/readyz")
BYTES_PER_TOKEN = 10_000
RATE_LIMITED_JSONRPC_CODE = -32000  # JSON-RPC "server error" range: implementation-defined
MAX_ID_PEEK_BYTES = 64 * 1024  # a rate-limited MCP request's body is read this far to echo its id
CHARGED = "engram.address_charged"  # scope key: the pre-auth stage already charged this address


@dataclass
class Bucket:
    tokens: float
    updated: float


class TokenBuckets:
    """Pure token-bucket arithmetic: ``take`` returns 0 when allowed, else seconds to wait.

    A request costing more than one token needs ``min(cost, burst)`` tokens in the bucket and then
    takes its whole cost: the bucket may go below zero (debt), which later requests wait out. So an
    expensive request is never refused for ever, and still pays for what it costs."""

    def __init__(self, per_minute: float, burst: int, max_keys: int = 100_000) -> None:
        self.per_minute = per_minute
        self.rate = per_minute / 60.0
        self.burst = burst
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, Bucket] = OrderedDict()

    def _refill(self, key: str, now: float) -> Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = Bucket(tokens=float(self.burst), updated=now)
            self._buckets[key] = bucket
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(key)
        bucket.tokens = min(self.burst, bucket.tokens + max(0.0, now - bucket.updated) * self.rate)
        bucket.updated = now
        return bucket

    def take(self, key: str, now: float, cost: float = 1.0) -> float:
        bucket = self._refill(key, now)
        need = min(cost, self.burst)
        if bucket.tokens >= need:
            bucket.tokens -= cost
            return 0.0
        return (need - bucket.tokens) / self.rate if self.rate > 0 else math.inf

    def charge(self, key: str, now: float, cost: float) -> None:
        """Take ``cost`` more tokens, into debt if need be (a body found larger than announced)."""
        if cost > 0:
            self._refill(key, now).tokens -= cost


def request_cost(body_bytes: int | None, bytes_per_token: int = BYTES_PER_TOKEN) -> int:
    """One token, plus one per started ``bytes_per_token`` of body beyond the first."""
    if not body_bytes or body_bytes <= bytes_per_token:
        return 1
    return 1 + math.ceil((body_bytes - bytes_per_token) / bytes_per_token)


class TrustedProxies:
    """Which peers may say who the client is (``ENGRAM_TRUSTED_PROXIES``, the same syntax and rule
    as the auth service's). Empty, the default: nobody; the socket peer is the client, and
    ``X-Forwarded-For`` is ignored. Otherwise addresses and CIDR blocks (``10.0.0.0/8, ::1``); a bad
    entry raises ValueError naming it, so the gateway does not start with it."""

    def __init__(self, spec: Iterable[str] | str = ()) -> None:
        items = spec.split(",") if isinstance(spec, str) else list(spec)
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for item in (i.strip() for i in items):
            if not item:
                continue
            try:
                self.networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError as exc:
                raise ValueError(f"ENGRAM_TRUSTED_PROXIES: {item!r} is not an IP address or network") from exc

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trusts(self, host: str | None) -> bool:
        address = hop_address(host or "")
        if address is None or not self.networks:
            return False
        ip = ipaddress.ip_address(address)
        return any(ip.version == network.version and ip in network for network in self.networks)

    def client(self, peer: str | None, forwarded_for: Iterable[str]) -> str | None:
        """The client address: the peer, or — when the peer is trusted — ``X-Forwarded-For`` read
        from the right, skipping trusted proxies: the first other hop. An unreadable hop stops the
        walk at the proxy that added it (nobody picks their own address by garbling the header)."""
        if not self.trusts(peer):
            return peer
        address = peer
        for hop in reversed([h for value in forwarded_for for h in value.split(",") if h.strip()]):
            hop_ip = hop_address(hop)
            if hop_ip is None:
                return address
            address = hop_ip
            if not self.trusts(address):
                return address
        return address


def hop_address(hop: str) -> str | None:
    """One address as proxies write it (``192.0.2.1``, ``192.0.2.1:5123``, ``[2001:db8::1]:80``) → address."""
    hop = hop.strip().strip('"')
    if hop.startswith("["):
        hop = hop[1:hop.find("]")] if "]" in hop else ""
    elif hop.count(":") == 1:
        hop = hop.split(":", 1)[0]
    try:
        return str(ipaddress.ip_address(hop))
    except ValueError:
        return None


def address_key(address: str | None) -> str:
    """The anonymous bucket of an address: IPv4 per address, IPv6 per /64 (one host usually holds a
    whole /64, so per-address buckets would not limit it)."""
    ip = hop_address(address or "")
    if ip is None:
        return f"ip:{address or 'unknown'}"
    parsed = ipaddress.ip_address(ip)
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return f"ip:{parsed.ipv4_mapped}"
        return f"ip:{ipaddress.ip_network(f'{ip}/64', strict=False)}"
    return f"ip:{parsed}"


class ClientAddressMiddleware:
    """Sets ``scope['client']`` (and the scheme, from ``X-Forwarded-Proto``) by the proxy rule
    above, for everything after it: rate limits, logs. Replaces uvicorn's ``proxy_headers``, which
    trusts loopback by default."""

    def __init__(self, app: ASGIApp, trusted: TrustedProxies) -> None:
        self.app = app
        self.trusted = trusted

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and self.trusted:
            peer = (scope.get("client") or (None, 0))[0]
            if self.trusted.trusts(peer):
                headers = scope.get("headers") or []
                forwarded = [v.decode("latin-1") for k, v in headers if k == b"x-forwarded-for"]
                client = self.trusted.client(peer, forwarded)
                scope = dict(scope)
                if client != peer:
                    scope["client"] = (client, 0)
                proto = next((v.decode("latin-1").split(",")[-1].strip().lower()
                              for k, v in headers if k == b"x-forwarded-proto"), None)
                if proto in ("http", "https"):
                    scope["scheme"] = proto if scope["type"] == "http" else {"http": "ws", "https": "wss"}[proto]
        await self.app(scope, receive, send)


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
    except ValueError:
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
        buckets = self.limits.authenticated
        wait = buckets.take(key, now, cost)
        if wait > 0:
            await refuse(scope, receive, send, wait=wait, per_minute=buckets.per_minute, who="credential", cost=cost,
                         bytes_per_token=self.limits.bytes_per_token)
            return
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


def header_deadline_protocol(timeout_s: float, body_idle_s: float | None = None) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol with two deadlines uvicorn lacks (slowloris, slow POST):

    * a request's headers must be complete within ``timeout_s`` of the connection's opening, or of
      the first byte of the next request on a kept-alive connection; otherwise 408 (when part of a
      request came) and the connection is closed;
    * while a request's body is being received, the client may pause at most ``body_idle_s``
      between chunks (not counted while the application is not reading); otherwise the connection is
      closed and the application sees the client disconnect.

    Idle kept-alive connections are closed by uvicorn's ``timeout_keep_alive``."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    base: Any = AutoHTTPProtocol

    class HeaderDeadlineProtocol(base):  # type: ignore[misc]
        header_timeout_s = timeout_s
        body_idle_timeout_s = body_idle_s

        def connection_made(self, transport: asyncio.Transport) -> None:
            self._header_timer: asyncio.TimerHandle | None = None
            self._body_timer: asyncio.TimerHandle | None = None
            self._headers_of: object = None  # the cycle whose headers were last completed
            self._got_bytes = False
            self._last_data = 0.0
            super().connection_made(transport)
            self._arm()

        def _between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _awaiting_body(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete and self.cycle.more_body

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(self.header_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            for name in ("_header_timer", "_body_timer"):
                timer = getattr(self, name, None)
                if timer is not None:
                    timer.cancel()
                    setattr(self, name, None)

        def data_received(self, data: bytes) -> None:
            if self._between_requests():
                self._got_bytes = True
                self._arm()
            super().data_received(data)
            if self.cycle is not None and self.cycle is not self._headers_of:  # a request's headers are complete
                self._headers_of = self.cycle
                self._got_bytes = False
                if self._header_timer is not None:
                    self._header_timer.cancel()
                    self._header_timer = None
            self._last_data = self.loop.time()
            if self.body_idle_timeout_s and self._body_timer is None and self._awaiting_body():
                self._body_timer = self.loop.call_later(self.body_idle_timeout_s, self._body_check)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _too_slow(self) -> None:
            self._header_timer = None
            if self.transport.is_closing():
                return
            if self._got_bytes and self._between_requests():
                log.info("%s: request headers not complete within %gs; closing", self.client, self.header_timeout_s)
                self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\n"
                                     b"content-length: 36\r\nconnection: close\r\n\r\n"
                                     b"request headers took too long (408)\n")
            self.transport.close()

        def _body_check(self) -> None:
            self._body_timer = None
            if self.transport.is_closing() or not self._awaiting_body():
                return
            limit = float(self.body_idle_timeout_s or 0)
            now = self.loop.time()
            if self.flow.read_paused:  # the application is not reading: not the client's pause
                self._last_data = now
            idle = now - self._last_data
            if idle < limit:
                self._body_timer = self.loop.call_later(limit - idle, self._body_check)
                return
            log.info("%s: request body paused for over %gs; closing", self.client, limit)
            self.transport.close()

    return HeaderDeadlineProtocol
