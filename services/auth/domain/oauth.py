"""OAuth 2.1 rules of the authorization server. Pure; no I/O.

Tokens and codes are 256 random bits behind a recognisable prefix and are stored as SHA-256
hashes only (like API keys: with that much entropy a fast hash is a safe one-way store).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any
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
# Private-use schemes without a dot that well-known MCP clients use (Cursor's
# ``cursor://anysphere.cursor-retrieval/oauth/callback``); everything else must be reverse-domain.
KNOWN_APP_SCHEMES = ("cursor",)
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*$")
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
def redirect_uri_problem(uri: str, app_schemes: Iterable[str] = KNOWN_APP_SCHEMES) -> str | None:
    """Why a redirect URI may not be registered, or None when it may.

    https anywhere; http only on a loopback host (native apps, RFC 8252 §7.3); private-use
    schemes for native apps only in reverse-domain form (RFC 8252 §7.1: ``com.example.app:/cb``,
    the scheme contains a dot) or named in ``app_schemes`` — so no OS protocol handler such as
    ``ms-msdt:`` or ``search-ms:``; never a fragment or a script/data scheme.
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
    if scheme in ("http", "https"):
        return None if parts.hostname else "needs a host"
    if not _SCHEME.match(scheme) or ("." not in scheme and scheme not in set(app_schemes)):
        return (f"the {scheme}: scheme is not allowed; native apps use a reverse-domain private-use scheme "
                "(RFC 8252 §7.1, e.g. com.example.app:/callback), a loopback http URI, or https")
    return None


def is_loopback_redirect(uri: str) -> bool:
    """An http(s) redirect to this machine's loopback interface (RFC 8252 §7.3)."""
    try:
        parts = urlsplit(uri)
        host = (parts.hostname or "").lower()
    except ValueError:
        return False
    if parts.scheme.lower() not in ("http", "https"):
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def may_redirect_errors(redirect_uri: str, user_has_grant: bool) -> bool:
    """RFC 9700 §4.11.2: whether /authorize may send an error to the client's redirect URI
    without the user's involvement. Anyone can register a client, so its redirect URI is not
    trusted by being registered: only a loopback redirect (it stays on the user's machine) or a
    client the signed-in user has already allowed (a live grant) is; otherwise an error page."""
    return user_has_grant or is_loopback_redirect(redirect_uri)


_CLIENT_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def looks_like_client_id(value: str) -> bool:
    """Client ids issued here are UUIDs (the SDK's registration handler makes them)."""
    return _CLIENT_ID.match(value) is not None


def redirect_uri_registered(requested: str, registered: list[str]) -> bool:
    """Exact string match against the registered URIs: no prefix, wildcard or path leniency."""
    return any(hmac.compare_digest(requested.encode(), r.encode()) for r in registered)


# Registration metadata (RFC 7591 §2): bounded and printable --------------------------------
@dataclass(frozen=True)
class MetadataLimits:
    redirect_uris: int = 10  # how many a client may register
    uri_chars: int = 2000  # each URI (redirect, client, logo, tos, policy, jwks)
    text_chars: int = 200  # client_name, software_id, software_version, scope, …
    contacts: int = 5
    contact_chars: int = 320
    list_items: int = 10  # grant_types, response_types
    jwks_chars: int = 8192
    total_chars: int = 32_768  # the whole stored record, as JSON


_URI_FIELDS = ("client_uri", "logo_uri", "tos_uri", "policy_uri", "jwks_uri")
# Cc (C0, DEL, C1), line/paragraph separators and the bidirectional overrides and isolates:
# what can forge a log line or disguise a name on the consent page.
_UNSAFE_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def has_control_chars(text: str) -> bool:
    return _UNSAFE_CHARS.search(text) is not None


def _strings(value: Any, path: str) -> Iterable[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _strings(str(k), f"{path}.key")
            yield from _strings(v, f"{path}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")


def metadata_problem(metadata: Mapping[str, Any], limits: MetadataLimits = MetadataLimits()) -> str | None:
    """Why this client metadata may not be registered (naming the field and the limit), or None.

    Without limits one anonymous registration could store megabytes (2,000 redirect URIs), and a
    newline in ``client_name`` forged lines in the log."""
    for path, text in _strings(dict(metadata), "metadata"):
        if has_control_chars(text):
            field = path.removeprefix("metadata.")
            return f"{field} must not contain control characters"
    uris = metadata.get("redirect_uris") or []
    if len(uris) > limits.redirect_uris:
        return f"redirect_uris: at most {limits.redirect_uris} redirect URIs may be registered"
    for i, uri in enumerate(uris):
        if len(str(uri)) > limits.uri_chars:
            return f"redirect_uris[{i}]: at most {limits.uri_chars} characters"
    for field in _URI_FIELDS:
        value = metadata.get(field)
        if value is not None and len(str(value)) > limits.uri_chars:
            return f"{field}: at most {limits.uri_chars} characters"
    for field, value in metadata.items():
        if isinstance(value, str) and field not in _URI_FIELDS and len(value) > limits.text_chars:
            return f"{field}: at most {limits.text_chars} characters"
    contacts = metadata.get("contacts") or []
    if len(contacts) > limits.contacts:
        return f"contacts: at most {limits.contacts} contacts"
    for i, contact in enumerate(contacts):
        if len(str(contact)) > limits.contact_chars:
            return f"contacts[{i}]: at most {limits.contact_chars} characters"
    for field in ("grant_types", "response_types"):
        values = metadata.get(field) or []
        if len(values) > limits.list_items:
            return f"{field}: at most {limits.list_items} values"
        for i, value in enumerate(values):
            if len(str(value)) > limits.text_chars:
                return f"{field}[{i}]: at most {limits.text_chars} characters"
    if metadata.get("jwks") is not None and len(json.dumps(metadata["jwks"])) > limits.jwks_chars:
        return f"jwks: at most {limits.jwks_chars} characters of JSON"
    if len(json.dumps(dict(metadata), default=str)) > limits.total_chars:
        return f"the client metadata may take at most {limits.total_chars} characters of JSON"
    return None


def log_safe(value: object, limit: int = 300) -> str:
    """Client input fit for a log line: control, separator and bidi characters escaped
    (``\\n``, ``\\x1b``, ``\\u2028``) so no input can start a forged line; bounded."""
    text = str(value)
    if len(text) > limit:
        text = text[:limit] + "…"
    return _UNSAFE_CHARS.sub(_escape_char, text)


def _escape_char(match: re.Match[str]) -> str:
    char = match.group(0)
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    if char in named:
        return named[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


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
FREE_FAILURES_PER_ACCOUNT = 10  # per username, whatever the address (a guesser with many addresses)
FAILURE_WINDOW = timedelta(minutes=15)
MAX_LOCKOUT = timedelta(minutes=15)


def lockout_after(failures: int, free: int = FREE_FAILURES) -> timedelta:
    """Exponential back-off once the free attempts are used: 30 s, 60 s, 120 s … capped at 15 min."""
    if failures < free:
        return timedelta(0)
    return min(MAX_LOCKOUT, timedelta(seconds=30 * 2 ** min(failures - free, 10)))


def throttle_keys(username: str, address: str) -> tuple[str, str]:
    return f"user:{username.lower()}|{address}", f"addr:{address}"


def account_key(username: str) -> str:
    """The failure counter of one account, from every address together."""
    return f"acct:{username.lower()}"


def sign_in_counters(username: str, address: str) -> list[tuple[str, int]]:
    """Every failure counter a failed sign-in adds to, with its free failures."""
    pair, addr = throttle_keys(username, address)
    return [(pair, FREE_FAILURES), (addr, FREE_FAILURES_PER_ADDRESS),
            (account_key(username), FREE_FAILURES_PER_ACCOUNT)]


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
