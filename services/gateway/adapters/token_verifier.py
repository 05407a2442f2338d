"""Bearer-token verification through the auth service, with a short cache that revocation events
clear at once (every gateway replica listens to them).

API keys carry no audience. OAuth access tokens name the MCP URL they were issued for (RFC 8707);
a token for any other resource is refused here, and is never passed on to anything.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections import OrderedDict
from typing import Any

from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend
from mcp.server.auth.provider import AccessToken
from nats.aio.msg import Msg
from starlette.requests import HTTPConnection

from contracts.auth import (
    API_KEY_AGGREGATE,
    GRANT_AGGREGATE,
    USER_AGGREGATE,
    ApiKeyView,
    AuthEventType,
    GrantRevokedState,
    TokenInfo,
    UserDeactivatedState,
    same_resource,
)
from contracts.envelope import QueryEnvelope
from contracts.events import Event
from contracts.subjects import AUTH
from kit import events
from kit.bus import Bus, BusUnavailable

log = logging.getLogger("engram.gateway.auth")
B64TOKEN = re.compile(r"^[A-Za-z0-9\-._~+/]+=*$")  # RFC 6750 §2.1
MAX_TOKEN_CHARS = 4096


def bearer_credential(values: list[str]) -> str | None:
    """The bearer token of a request's Authorization header values, or None when RFC 6750 does not
    allow it: more than one header, another scheme, or a credential that is not a single b64token."""
    if len(values) != 1:
        return None
    scheme, _, credential = values[0].strip().partition(" ")
    if scheme.lower() != "bearer" or not B64TOKEN.match(credential) or len(credential) > MAX_TOKEN_CHARS:
        return None
    return credential


class StrictBearerBackend(BearerAuthBackend):
    """The SDK's bearer backend, refusing what :func:`bearer_credential` refuses."""

    async def authenticate(self, conn: HTTPConnection):  # type: ignore[no-untyped-def]
        values = conn.headers.getlist("authorization")
        if len(values) > 1:
            log.warning("request refused: %d Authorization headers", len(values))
        if bearer_credential(values) is None:
            return None
        return await super().authenticate(conn)


class IntrospectionVerifier:
    """``mcp`` TokenVerifier backed by auth-service introspection over NATS."""

    def __init__(
        self, bus: Bus, ttl_s: float = 30.0, negative_ttl_s: float = 2.0, max_entries: int = 10_000,
        resource: str | None = None,
    ) -> None:
        self.bus = bus
        self.resource = resource  # this gateway's MCP URL: the only audience accepted
        self.ttl_s = ttl_s
        self.negative_ttl_s = negative_ttl_s
        self.max_entries = max_entries
        self._cache: OrderedDict[str, tuple[float, TokenInfo]] = OrderedDict()
        #: introspections under way, by token digest: concurrent requests with one token share one
        #: auth lookup (200 clients of one key after a restart, or when its cache entry expires)
        self._in_flight: dict[str, asyncio.Future[TokenInfo]] = {}
        self._sub: object | None = None

    async def start(self) -> None:
        """Listen for revocations (API keys, OAuth grants, disabled users) so they take effect at once."""
        self._subs = [
            await self.bus.nc.subscribe(self.bus.names.events_of(aggregate), cb=self._on_key_event)
            for aggregate in (API_KEY_AGGREGATE, GRANT_AGGREGATE, USER_AGGREGATE)
        ]
        await self.bus.settle()  # a revocation published once start returns is heard

    async def _on_key_event(self, msg: Msg) -> None:
        try:
            event = events.parse_known(msg.data)
        except ValueError:
            log.warning("an auth event that does not parse was ignored on %s", msg.subject)
            return
        if event is None:
            return
        self.on_auth_event(event)

    def on_auth_event(self, event: Event[Any]) -> None:
        """Drop the cached credentials an auth event revokes (typed: ``contracts.auth``'s models)."""
        data = event.data
        if event.type == AuthEventType.API_KEY_REVOKED and isinstance(data, ApiKeyView):
            self.forget_key(str(data.key_id))
        elif event.type == AuthEventType.TOKEN_REVOKED and isinstance(data, GrantRevokedState):
            self.forget_grant(str(data.grant_id))
        elif event.type == AuthEventType.USER_DEACTIVATED and isinstance(data, UserDeactivatedState):
            self.forget_tenant(data.user_id)

    def _forget(self, match) -> None:  # type: ignore[no-untyped-def]
        for digest in [d for d, (_, info) in self._cache.items() if match(info)]:
            self._cache.pop(digest, None)

    def forget_key(self, key_id: str) -> None:
        self._forget(lambda info: str(info.key_id) == key_id)

    def forget_grant(self, grant_id: str) -> None:
        self._forget(lambda info: info.grant_id == grant_id)

    def forget_tenant(self, tenant: str) -> None:
        self._forget(lambda info: info.tenant == tenant)

    async def verify_token(self, token: str) -> AccessToken | None:
        if not B64TOKEN.match(token) or len(token) > MAX_TOKEN_CHARS:
            return None
        info = await self.introspect(token)
        if not info.active or not info.tenant:
            return None
        if info.resource is not None and not same_resource(info.resource, self.resource):
            # RFC 8707 / MCP authorization: a token issued for another resource is refused, never passed on.
            log.warning("token of client %s refused: issued for %s, not %s", info.client_id, info.resource, self.resource)
            return None
        return AccessToken(
            token=token,
            client_id=info.client_id or "unknown",
            scopes=info.scopes,
            expires_at=info.expires_at,
            resource=info.resource,
            subject=info.tenant,
            claims={"key_id": str(info.key_id) if info.key_id else None, "project": info.project,
                    "grant_id": info.grant_id, "user_name": info.user_name},
        )

    def known_valid(self, token: str) -> bool:
        """Whether ``token`` is held as valid for this resource, so the pre-authentication rate limit
        lets its request through: valid at its last introspection (even past the cache's TTL: a
        revocation removes the entry at once, and the request is introspected again anyway), or
        being introspected right now (the request then waits for that lookup and costs none)."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        if digest in self._in_flight:
            return True
        cached = self._cache.get(digest)
        if cached is None:
            return False
        info = cached[1]
        if not info.active or not info.tenant:
            return False
        if info.expires_at is not None and info.expires_at < int(time.time()):
            return False
        return info.resource is None or same_resource(info.resource, self.resource)

    async def introspect(self, token: str) -> TokenInfo:
        digest = hashlib.sha256(token.encode()).hexdigest()
        cached = self._cache.get(digest)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        lookup = self._in_flight.get(digest)
        if lookup is None:  # the first to ask: one lookup, which the others asking meanwhile share
            lookup = asyncio.ensure_future(self._ask(token, digest))
            self._in_flight[digest] = lookup
            lookup.add_done_callback(lambda _: self._in_flight.pop(digest, None))
        return await asyncio.shield(lookup)  # a caller that gives up does not cancel the others' lookup

    async def _ask(self, token: str, digest: str) -> TokenInfo:
        """One introspection by the auth service, cached (a refusal briefly, a valid token for the TTL)."""
        try:
            reply = await self.bus.query(
                AUTH, "introspect", QueryEnvelope(type="introspect", payload={"token": token}), timeout=5.0
            )
        except BusUnavailable:
            log.error("auth service unavailable: every request is refused until it answers")
            return TokenInfo(active=False)
        if not reply.ok:
            log.warning("introspection failed: %s", reply.error)
            return TokenInfo(active=False)
        info = TokenInfo.model_validate(reply.result)
        self._cache[digest] = (time.monotonic() + (self.ttl_s if info.active else self.negative_ttl_s), info)
        self._cache.move_to_end(digest)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
        return info
