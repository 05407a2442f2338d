"""OAuth 2.1 rules of the authorization server. Pure; no I/O.

Tokens and codes are 256 random bits behind a recognisable prefix and are stored as SHA-256
hashes only (like API keys: with that much entropy a fast hash is a safe one-way store).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from urllib.parse import urlsplit

from contracts.auth import (
    OAUTH_ACCESS_TOKEN_PREFIX,
    OAUTH_CODE_PREFIX,
    OAUTH_REFRESH_TOKEN_PREFIX,
    OAUTH_SCOPES,
    same_resource,
)

TOKEN_BYTES = 32  # 256 bits
ACCESS_TOKEN_TTL = timedelta(hours=1)
REFRESH_TOKEN_TTL = timedelta(days=30)
CODE_TTL = timedelta(minutes=10)
REQUEST_TTL = timedelta(minutes=10)
SESSION_TTL = timedelta(hours=12)
LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}
FORBIDDEN_REDIRECT_SCHEMES = {"javascript", "data", "file", "vbscript", "about", "blob"}
VALID_OAUTH_SCOPES = [s.value for s in OAUTH_SCOPES]


def new_secret(prefix: str = "") -> str:
    return prefix + secrets.token_urlsafe(TOKEN_BYTES)


def new_access_token() -> str:
    return new_secret(OAUTH_ACCESS_TOKEN_PREFIX)


def new_refresh_token() -> str:
    return new_secret(OAUTH_REFRESH_TOKEN_PREFIX)


def new_code() -> str:
    return new_secret(OAUTH_CODE_PREFIX)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def same_secret(presented: str, stored_hash: str) -> bool:
    """Compare a presented secret with a stored hash in constant time."""
    return hmac.compare_digest(hash_secret(presented).encode(), stored_hash.encode())


def looks_like(token: str, prefix: str) -> bool:
    return token.startswith(prefix) and len(prefix) + 40 <= len(token) <= len(prefix) + 60


# PKCE (RFC 7636, S256 only as OAuth 2.1 requires) -------------------------------------------
def s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode("ascii", "replace")).digest()).decode().rstrip("=")


def pkce_matches(verifier: str, challenge: str) -> bool:
    """RFC 7636 §4.6 with S256; verifiers must be 43-128 unreserved characters (§4.1)."""
    if not 43 <= len(verifier) <= 128 or any(c not in _UNRESERVED for c in verifier):
        return False
    return hmac.compare_digest(s256(verifier).encode(), challenge.encode())


_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def valid_challenge(challenge: str) -> bool:
    """An S256 challenge is the 43-character base64url encoding of a SHA-256 digest."""
    return len(challenge) == 43 and all(c in _UNRESERVED for c in challenge)


# Redirect URIs (OAuth 2.1 §2.3.1 / §7.5: registered in full, compared exactly) ---------------
def redirect_uri_problem(uri: str) -> str | None:
    """Why a redirect URI may not be registered, or None when it may.

    https anywhere; http only on a loopback host (native apps, RFC 8252 §7.3); private-use
    schemes (``cursor://…``) for native apps; never a fragment or a script/data scheme.
    """
    try:
        parts = urlsplit(uri)
    except ValueError:
        return "not a URI"
    scheme = parts.scheme.lower()
    if not scheme:
        return "must be an absolute URI"
    if parts.fragment or "#" in uri:
        return "must not contain a fragment"
    if scheme in FORBIDDEN_REDIRECT_SCHEMES:
        return f"the {scheme}: scheme is not allowed"
    if scheme == "http" and (parts.hostname or "").lower() not in LOOPBACK_HOSTS:
        return "http is allowed for loopback hosts only (localhost, 127.0.0.1, [::1]); use https"
    if scheme in ("http", "https") and not parts.hostname:
        return "needs a host"
    return None


def redirect_uri_registered(requested: str, registered: list[str]) -> bool:
    """Exact string match against the registered URIs: no prefix, wildcard or path leniency."""
    return any(hmac.compare_digest(requested.encode(), r.encode()) for r in registered)


# Resource indicators (RFC 8707) ------------------------------------------------------------




def resource_problem(requested: str | None, ours: str) -> str | None:
    """RFC 8707 §2: the resource must be an absolute URI without a fragment, and ours."""
    if requested is None:
        return None  # bound to our MCP URL
    if "#" in requested:
        return "the resource indicator must not contain a fragment"
    if not same_resource(requested, ours):
        return f"this server issues tokens for {ours} only"
    return None


# Scopes -----------------------------------------------------------------------------------
def grantable_scopes(requested: list[str] | None, client_scopes: str | None, default: list[str]) -> list[str] | None:
    """The scopes a grant may carry, or None when one requested is unknown to OAuth here."""
    wanted = requested if requested else (client_scopes.split() if client_scopes else default)
    if any(s not in VALID_OAUTH_SCOPES for s in wanted):
        return None
    return sorted(set(wanted), key=VALID_OAUTH_SCOPES.index)


# Refresh token rotation with reuse detection (OAuth 2.1 §4.3.1) ------------------------------
class RefreshVerdict(StrEnum):
    OK = "ok"  # rotate: this token is spent, a new pair is issued
    REUSED = "reused"  # already rotated: a copy is in other hands; revoke the whole grant
    INVALID = "invalid"  # expired, revoked, user disabled, other client


@dataclass(frozen=True)
class RefreshState:
    client_id: str
    expires_at: datetime
    rotated_at: datetime | None
    revoked: bool  # the token or its grant
    user_disabled: bool


def refresh_verdict(state: RefreshState, client_id: str, now: datetime) -> RefreshVerdict:
    if state.client_id != client_id:
        return RefreshVerdict.INVALID
    if state.revoked or state.user_disabled:
        return RefreshVerdict.INVALID
    if state.rotated_at is not None:
        return RefreshVerdict.REUSED
    if state.expires_at <= now:
        return RefreshVerdict.INVALID
    return RefreshVerdict.OK


# Login throttling --------------------------------------------------------------------------
FREE_FAILURES = 5  # per (username, client address) before a lock-out
FREE_FAILURES_PER_ADDRESS = 30  # per client address, whatever the username (credential stuffing)
FAILURE_WINDOW = timedelta(minutes=15)
MAX_LOCKOUT = timedelta(minutes=15)


def lockout_after(failures: int, free: int = FREE_FAILURES) -> timedelta:
    """Exponential back-off once the free attempts are used: 30 s, 60 s, 120 s … capped at 15 min."""
    if failures < free:
        return timedelta(0)
    return min(MAX_LOCKOUT, timedelta(seconds=30 * 2 ** min(failures - free, 10)))


def throttle_keys(username: str, address: str) -> tuple[str, str]:
    return f"user:{username.lower()}|{address}", f"addr:{address}"


def client_address(raw: str | None) -> str:
    try:
        return str(ipaddress.ip_address(raw or ""))
    except ValueError:
        return "unknown"


# CSRF (double-submit cookie, compared in constant time) ---------------------------------------
def csrf_ok(form_value: str | None, cookie_value: str | None) -> bool:
    if not form_value or not cookie_value or len(cookie_value) < 32:
        return False
    return hmac.compare_digest(form_value.encode(), cookie_value.encode())


def origin_ok(origin: str | None, issuer: str) -> bool:
    """A browser's Origin on a form POST must be ours; no Origin (older agents, tests) is allowed."""
    if origin is None:
        return True
    if origin == "null":
        return False
    return same_resource(origin, issuer_origin(issuer))


def issuer_origin(issuer: str) -> str:
    parts = urlsplit(issuer)
    return f"{parts.scheme}://{parts.netloc}"
