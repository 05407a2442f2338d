"""The edge of every HTTP service (gateway and auth alike): who the client is, how much it may
ask, and how long it may take to say it.

* :class:`TokenBuckets`: per-key token buckets with a cost per request (an expensive request may
  go into debt, which later requests wait out); pure arithmetic, time passed in.
* :class:`TrustedProxies` and :class:`ClientAddressMiddleware`: the client address is the socket
  peer, unless the peer is a configured trusted proxy (``ENGRAM_TRUSTED_PROXIES``); then the
  nearest untrusted hop of ``X-Forwarded-For``. Nobody picks their own address by default.
  :func:`address_key`: IPv6 clients are counted per /64.
* :func:`header_deadline_protocol`: uvicorn's HTTP protocol with the header-read and body-idle
  deadlines uvicorn lacks (slowloris, slow POST).
* :class:`HostCheckMiddleware`: the protection against DNS rebinding on every route — a request
  whose ``Host`` is not one of the service's own names is refused (421) before anything answers it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
from collections import OrderedDict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("engram.edge")


@dataclass
class Bucket:
    tokens: float
    updated: float


#: ASGI scope key: (tokens left, burst, per minute) of the credential's rate-limit bucket once this
#: request took its share (set by the gateway's limiter; its MCP tools warn a client running low)
RATE_LEFT = "engram.rate_left"


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

    def left(self, key: str) -> float:
        """The tokens ``key`` holds after its last take (the burst for a key never seen)."""
        bucket = self._buckets.get(key)
        return float(self.burst) if bucket is None else bucket.tokens

    def charge(self, key: str, now: float, cost: float) -> None:
        """Take ``cost`` more tokens, into debt if need be (a body found larger than announced)."""
        if cost > 0:
            self._refill(key, now).tokens -= cost


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


def host_allowlist(public_url: str, port: int, extra: Iterable[str] = ()) -> list[str]:
    """The ``Host`` values a service answers: its public URL's, itself on loopback (any port: a local
    install, a port-forward), and ``extra`` (``ENGRAM_ALLOWED_HOSTS``: in-cluster names and the like)."""
    hosts = {urlparse(public_url).netloc, f"127.0.0.1:{port}", f"localhost:{port}", "127.0.0.1:*", "localhost:*"}
    return sorted((hosts | set(extra)) - {""})


def host_allowed(host: str | None, allowed: Iterable[str]) -> bool:
    """The rule of the MCP SDK's DNS-rebinding protection: an exact value, or ``name:*`` for that
    name with any port."""
    if not host:
        return False
    for entry in allowed:
        if host == entry or (entry.endswith(":*") and host.startswith(entry[:-2] + ":")):
            return True
    return False


class HostCheckMiddleware:
    """Refuses (421 Misdirected Request) an HTTP request whose ``Host`` header is not one of the
    service's own (:func:`host_allowed`), on every route: a page of another site that rebinds its
    name to this address gets nothing from the REST API, the sign-in page or the metrics. ``exempt``
    paths (liveness and readiness probes, which an orchestrator sends to the pod's address) pass."""

    def __init__(self, app: ASGIApp, *, allowed: Iterable[str], exempt: Collection[str] = ()) -> None:
        self.app = app
        self.allowed = tuple(allowed)
        self.exempt = frozenset(exempt)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") in self.exempt:
            await self.app(scope, receive, send)
            return
        values = [v.decode("latin-1") for k, v in scope.get("headers") or [] if k == b"host"]
        host = values[0] if len(values) == 1 else None
        if host_allowed(host, self.allowed):
            await self.app(scope, receive, send)
            return
        log.warning("refused a request for Host %r (DNS rebinding protection; ENGRAM_ALLOWED_HOSTS adds names)",
                    (host or "")[:100])
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = (b'{"error":{"code":"invalid_argument","field":"Host","message":"this server does not answer '
                b'for that Host header (DNS rebinding protection); use its own address"}}')
        await send({"type": "http.response.start", "status": 421,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


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
