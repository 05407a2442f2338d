"""Bearer-token verification through the auth service, with a short cache that revocation events
clear at once (every gateway replica listens to them)."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import OrderedDict

from mcp.server.auth.provider import AccessToken
from nats.aio.msg import Msg

from contracts.auth import AuthEventType, TokenInfo
from contracts.envelope import QueryEnvelope
from contracts.subjects import AUTH
from kit.bus import Bus, BusUnavailable

log = logging.getLogger("engram.gateway.auth")


class IntrospectionVerifier:
    """``mcp`` TokenVerifier backed by auth-service introspection over NATS."""

    def __init__(self, bus: Bus, ttl_s: float = 30.0, negative_ttl_s: float = 2.0, max_entries: int = 10_000) -> None:
        self.bus = bus
        self.ttl_s = ttl_s
        self.negative_ttl_s = negative_ttl_s
        self.max_entries = max_entries
        self._cache: OrderedDict[str, tuple[float, TokenInfo]] = OrderedDict()
        self._sub: object | None = None

    async def start(self) -> None:
        """Listen for key revocations so a revoked key stops working at once."""
        self._sub = await self.bus.nc.subscribe(self.bus.names.events_of("apikey"), cb=self._on_key_event)

    async def _on_key_event(self, msg: Msg) -> None:
        try:
            event = json.loads(msg.data)
        except ValueError:
            return
        if event.get("type") == AuthEventType.API_KEY_REVOKED.value:
            self.forget_key(str(event.get("aggregate_id")))

    def forget_key(self, key_id: str) -> None:
        for digest in [d for d, (_, info) in self._cache.items() if str(info.key_id) == key_id]:
            self._cache.pop(digest, None)

    async def verify_token(self, token: str) -> AccessToken | None:
        info = await self.introspect(token)
        if not info.active or not info.tenant:
            return None
        return AccessToken(
            token=token,
            client_id=info.client_id or "unknown",
            scopes=info.scopes,
            expires_at=info.expires_at,
            subject=info.tenant,
            claims={"key_id": str(info.key_id) if info.key_id else None, "project": info.project},
        )

    async def introspect(self, token: str) -> TokenInfo:
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached and cached[0] > now:
            return cached[1]
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
        self._cache[digest] = (now + (self.ttl_s if info.active else self.negative_ttl_s), info)
        self._cache.move_to_end(digest)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
        return info
