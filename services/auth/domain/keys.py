"""API key rules: generation, hashing, validity. Pure; no I/O."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID, uuid4

from contracts.auth import API_KEY_PREFIX

KEY_BYTES = 32  # 256 bits of randomness
DISPLAY_PREFIX_CHARS = 8


@dataclass(frozen=True)
class NewKey:
    key_id: UUID
    secret: str
    hash: str
    display_prefix: str


def hash_key(secret: str) -> str:
    """Keys carry 256 random bits, so a plain SHA-256 is a safe one-way store (no stretching needed)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def generate_key() -> NewKey:
    secret = API_KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)
    return NewKey(
        key_id=uuid4(),
        secret=secret,
        hash=hash_key(secret),
        display_prefix=secret[: len(API_KEY_PREFIX) + DISPLAY_PREFIX_CHARS],
    )


def looks_like_key(token: str) -> bool:
    return token.startswith(API_KEY_PREFIX) and 20 <= len(token) <= 200


def same_hash(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def is_usable(revoked_at: datetime | None, expires_at: datetime | None, user_disabled: bool, now: datetime) -> bool:
    if revoked_at is not None or user_disabled:
        return False
    return expires_at is None or expires_at > now


def expiry(now: datetime, days: int | None) -> datetime | None:
    return now + timedelta(days=days) if days else None


def new_user_id() -> str:
    return "u" + uuid4().hex
