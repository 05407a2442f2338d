"""Who is calling, what they may do, and which project applies. Pure rules, no I/O."""

from __future__ import annotations

import base64
import binascii
import contextvars
import json
import re
import secrets
from dataclasses import dataclass, replace

from mcp.server.auth.provider import AccessToken

from contracts.auth import Scope
from contracts.memory import DEFAULT_PROJECT


class AccessDenied(Exception):
    """The caller lacks a scope or reaches outside its project."""

    def __init__(self, message: str, scope: str | None = None, field: str = "project") -> None:
        super().__init__(message)
        self.scope = scope
        self.field = field  # (without a scope: the request's field that reaches too far)


@dataclass(frozen=True)
class Principal:
    tenant: str
    client_id: str
    scopes: frozenset[str]
    key_id: str | None = None
    project: str | None = None  # the key is restricted to this project
    user_name: str | None = None  # the user's display name, when the token introspection gives it
    #: delegation: the credential's own user, when this call acts for ``tenant`` (``memory:act-as``)
    actor: str | None = None

    @classmethod
    def from_token(cls, token: AccessToken) -> Principal:
        claims = token.claims or {}
        if not token.subject:
            raise AccessDenied("token has no subject")
        return cls(
            tenant=token.subject,
            client_id=token.client_id,
            scopes=frozenset(token.scopes),
            key_id=claims.get("key_id"),
            project=claims.get("project"),
            user_name=claims.get("user_name"),
        )

    def acting_for(self, user_id: str) -> Principal:
        """This credential acting for ``user_id`` (the ``user_id`` argument of the AI-memory design's tools,
        docs/design.md §3): its own user as is; another user only with ``memory:act-as``, every rule
        then applying to that user as if they had called (the key's project restriction included),
        and the credential's user kept as the actor."""
        if user_id == self.tenant:
            return self
        if Scope.MEMORY_ACT_AS.value not in self.scopes:
            raise AccessDenied(
                f"user_id {user_id[:64]!r} is not the user this credential acts for (whoAmI tells which): a "
                f"credential reaches its own user's memories only, unless the operator gave it the "
                f"'{Scope.MEMORY_ACT_AS.value}' scope to act for the users it names", Scope.MEMORY_ACT_AS.value)
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,128}", user_id):
            raise AccessDenied("user_id must be 1-128 characters of [A-Za-z0-9_-]")
        return replace(self, tenant=user_id, actor=self.actor or self.tenant, user_name=None)

    def require(self, scope: Scope) -> None:
        if scope.value not in self.scopes and Scope.ADMIN.value not in self.scopes:
            raise AccessDenied(f"this credential lacks the '{scope.value}' scope", scope.value)

    def project_for(self, requested: str | None, pinned: str | None = None) -> str:
        """The project a call works in: the key's restriction, else the pin, else the request, else default."""
        wanted = requested or pinned
        if self.project is not None:
            if wanted is not None and wanted != self.project:
                raise AccessDenied(f"this credential is restricted to project '{self.project}'")
            return self.project
        return wanted or DEFAULT_PROJECT

    def search_project(self, requested: str | None, pinned: str | None = None) -> str | None:
        """Like ``project_for`` but None (all projects) when nothing narrows the search."""
        if self.project is None and requested is None and pinned is None:
            return None
        return self.project_for(requested, pinned)


# Who is calling: the MCP client's self-description from ``initialize``, carried in the session id ---------
#: ``Mcp-Session-Id`` values minted by this gateway: ``egs1.<nonce>.<base64url JSON {"n": name, "v": version}>``
SESSION_PREFIX = "egs1"
MAX_CLIENT_NAME = 100
MAX_CLIENT_VERSION = 50
_PRINTABLE = re.compile(r"^[^\x00-\x1f\x7f]+$")
session_client: contextvars.ContextVar[ClientInfo | None] = contextvars.ContextVar("engram_session_client",
                                                                                 default=None)


@dataclass(frozen=True)
class ClientInfo:
    """The assistant's MCP client as it named itself at ``initialize`` (``clientInfo``). Self-declared:
    shown and recorded ("saved by …"), never used to decide access."""

    name: str
    version: str | None = None

    @classmethod
    def parse(cls, name: object, version: object = None) -> ClientInfo | None:
        """A client info from untrusted values, or None when they are not short printable strings."""
        if not isinstance(name, str) or not 1 <= len(name.strip()) <= MAX_CLIENT_NAME or not _PRINTABLE.match(name):
            return None
        ok_version = isinstance(version, str) and 1 <= len(version.strip()) <= MAX_CLIENT_VERSION and \
            _PRINTABLE.match(version)
        return cls(name.strip(), version.strip() if ok_version else None)  # type: ignore[union-attr]

    @property
    def label(self) -> str:
        """``name/version`` (what a memory's history records)."""
        return f"{self.name}/{self.version}" if self.version else self.name


#: where a client of the stateless protocol revision (2026-07-28) names itself on every request
CLIENT_INFO_META_KEY = "io.modelcontextprotocol/clientInfo"


def client_from_message(body: bytes) -> tuple[ClientInfo | None, bool]:
    """The client a JSON-RPC request body names — ``params.clientInfo`` of an ``initialize``, else
    ``params._meta["io.modelcontextprotocol/clientInfo"]`` (the stateless revision sends it with every
    request) — and whether the body is an ``initialize``."""
    if b"clientInfo" not in body:
        return None, False
    try:
        message = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested too deep to parse
        return None, False
    params = message.get("params") if isinstance(message, dict) else None
    if not isinstance(params, dict):
        return None, False
    initialize = message.get("method") == "initialize"
    meta = params.get("_meta")
    info = params.get("clientInfo") if initialize else meta.get(CLIENT_INFO_META_KEY) if isinstance(meta, dict) else None
    return (ClientInfo.parse(info.get("name"), info.get("version")) if isinstance(info, dict) else None), initialize


def client_from_initialize(body: bytes) -> ClientInfo | None:
    """The ``clientInfo`` of a JSON-RPC ``initialize`` request body (None for any other body)."""
    client, initialize = client_from_message(body)
    return client if initialize else None


def session_id_for(client: ClientInfo) -> str:
    """A session id carrying the client info (visible ASCII only, as the MCP spec requires), unique per
    session. Not signed: it holds only what the client itself said at ``initialize``."""
    payload = json.dumps({"n": client.name, "v": client.version}, separators=(",", ":"), ensure_ascii=False)
    encoded = base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")
    return f"{SESSION_PREFIX}.{secrets.token_urlsafe(12)}.{encoded}"


def client_from_session_id(value: str | None) -> ClientInfo | None:
    """The client info a session id minted by :func:`session_id_for` carries (None for anything else)."""
    if not value or len(value) > 1024:
        return None
    prefix, _, rest = value.partition(".")
    _, _, encoded = rest.partition(".")
    if prefix != SESSION_PREFIX or not encoded:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    return ClientInfo.parse(data.get("n"), data.get("v")) if isinstance(data, dict) else None


def bearer_challenge(
    resource_metadata: str, scope: str, error: str | None = None, description: str | None = None
) -> str:
    """A ``WWW-Authenticate`` value (RFC 6750 §3, RFC 9728 §5.1). Without credentials no error code
    is given (RFC 6750 §3.1); a bad token gets ``invalid_token``, a missing scope ``insufficient_scope``."""
    parts = []
    if error:
        parts.append(f'error="{error}"')
    if description:
        parts.append(f'error_description="{description}"')
    parts.append(f'resource_metadata="{resource_metadata}"')
    parts.append(f'scope="{scope}"')
    return "Bearer " + ", ".join(parts)
