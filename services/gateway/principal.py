"""Who is calling, what they may do, and which project applies. Pure rules, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from mcp.server.auth.provider import AccessToken

from contracts.auth import Scope
from contracts.memory import DEFAULT_PROJECT


class AccessDenied(Exception):
    """The caller lacks a scope or reaches outside its project."""

    def __init__(self, message: str, scope: str | None = None) -> None:
        super().__init__(message)
        self.scope = scope


@dataclass(frozen=True)
class Principal:
    tenant: str
    client_id: str
    scopes: frozenset[str]
    key_id: str | None = None
    project: str | None = None  # the key is restricted to this project

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
        )

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
