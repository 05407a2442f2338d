"""Per-credential rate limits: a token bucket for each API key / OAuth client, and one per client
address for unauthenticated requests (slows down token guessing). Over the limit: 429 with
Retry-After. Buckets live in each gateway replica's memory, so N replicas allow up to N× the
rate in total — fine for abuse protection; a cluster-wide quota would need shared state."""

from __future__ import annotations

import json
import math
import time
from collections import OrderedDict
from dataclasses import dataclass

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.types import ASGIApp, Receive, Scope, Send

EXEMPT_PATHS = ("/healthz", "/readyz")


@dataclass
class Bucket:
    tokens: float
    updated: float


class TokenBuckets:
    """Pure token-bucket arithmetic: ``take`` returns 0 when allowed, else seconds to wait."""

    def __init__(self, per_minute: float, burst: int, max_keys: int = 100_000) -> None:
        self.rate = per_minute / 60.0
        self.burst = burst
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, Bucket] = OrderedDict()

    def take(self, key: str, now: float) -> float:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = Bucket(tokens=float(self.burst), updated=now)
            self._buckets[key] = bucket
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(key)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.rate)
        bucket.updated = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self.rate if self.rate > 0 else math.inf


class RateLimitMiddleware:
    """Runs after authentication (reads ``scope['user']``)."""

    def __init__(self, app: ASGIApp, per_minute: float, burst: int, anonymous_per_minute: float) -> None:
        self.app = app
        self.authenticated = TokenBuckets(per_minute, burst)
        self.anonymous = TokenBuckets(anonymous_per_minute, max(1, int(anonymous_per_minute // 6)))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "").startswith(EXEMPT_PATHS):
            await self.app(scope, receive, send)
            return
        user = scope.get("user")
        now = time.monotonic()
        if isinstance(user, AuthenticatedUser):
            claims = user.access_token.claims or {}
            key = f"cred:{claims.get('key_id') or user.access_token.client_id}:{user.access_token.subject}"
            wait = self.authenticated.take(key, now)
        else:
            client = scope.get("client") or ("unknown", 0)
            wait = self.anonymous.take(f"ip:{client[0]}", now)
        if wait <= 0:
            await self.app(scope, receive, send)
            return
        retry_after = str(max(1, math.ceil(wait)))
        body = json.dumps({"error": {
            "code": "rate_limited",
            "message": f"too many requests for this credential; retry after {retry_after}s",
            "field": None,
        }}).encode()
        await send({"type": "http.response.start", "status": 429, "headers": [
            (b"content-type", b"application/json"), (b"retry-after", retry_after.encode()),
        ]})
        await send({"type": "http.response.body", "body": body})
