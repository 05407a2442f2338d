"""Auth service contracts: API keys, users, OAuth tokens, introspection and the events gateways listen to."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal
from urllib.parse import urlsplit
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contracts.events import aggregate
from contracts.memory import PROJECT_PATTERN, TEXT_PATTERN
from contracts.messages import command, messages_of, query
from contracts.subjects import AUTH

API_KEY_PREFIX = "egm_"
OAUTH_ACCESS_TOKEN_PREFIX = "egat_"
OAUTH_REFRESH_TOKEN_PREFIX = "egrt_"
OAUTH_CODE_PREFIX = "egac_"
USERNAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}$"
USER_ID_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"


class Scope(StrEnum):
    MEMORY_READ = "memory:read"
    MEMORY_WRITE = "memory:write"
    MEMORY_MAINTENANCE = "memory:maintenance"
    #: delegation: a service credential acting for the user a call names (the ``user_id`` argument of the agent-centric design's tools); granted
    #: by the operator on API keys only (never through OAuth), recorded as the actor on every write
    MEMORY_ACT_AS = "memory:act-as"
    #: a user's own API keys: create (at most the asking credential's scopes and project), list, revoke
    KEYS_MANAGE = "keys:manage"
    ADMIN = "admin"


DEFAULT_KEY_SCOPES = (Scope.MEMORY_READ, Scope.MEMORY_WRITE)
# What an OAuth client may ask a user for (``admin`` is for API keys made by the operator only).
OAUTH_SCOPES = (Scope.MEMORY_READ, Scope.MEMORY_WRITE, Scope.MEMORY_MAINTENANCE, Scope.KEYS_MANAGE)
#: What a key a user makes for themselves may hold (admin, act-as and keys:manage are the operator's to grant).
OwnKeyScope = Literal["memory:read", "memory:write", "memory:maintenance"]
DEFAULT_OAUTH_SCOPES = (Scope.MEMORY_READ, Scope.MEMORY_WRITE)


class CreateApiKey(BaseModel):
    """Create an API key. Without ``user_id`` a new user (tenant) is created for it."""

    model_config = ConfigDict(extra="forbid")

    user_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]{1,128}$")
    user_name: str | None = Field(None, min_length=1, max_length=200, pattern=TEXT_PATTERN)
    name: str = Field("default", min_length=1, max_length=200, pattern=TEXT_PATTERN)
    scopes: list[Scope] = Field(default_factory=lambda: list(DEFAULT_KEY_SCOPES), min_length=1)
    project: str | None = Field(None, pattern=PROJECT_PATTERN)
    expires_in_days: int | None = Field(None, ge=1, le=3650)

    @model_validator(mode="after")
    def _admin_is_install_wide(self) -> CreateApiKey:
        if self.project is not None and Scope.ADMIN in self.scopes:
            raise ValueError(
                "the admin scope is the install operator's (it manages every user's keys) and cannot be "
                "restricted to a project: create an admin key without a project, or a project key without admin"
            )
        return self


class CreateMyApiKey(BaseModel):
    """Create an API key of one's own (the asking credential needs ``keys:manage``): for the same user,
    with at most the asking credential's scopes, restricted to its project when it is restricted to
    one. The secret is in the reply only."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("default", min_length=1, max_length=200, pattern=TEXT_PATTERN)
    scopes: list[OwnKeyScope] = Field(default_factory=lambda: [s.value for s in DEFAULT_KEY_SCOPES], min_length=1,
                                      max_length=3, description="at most the asking credential's own")
    project: str | None = Field(None, pattern=PROJECT_PATTERN,
                                description="restrict the key to this project (a restricted credential: its own)")
    expires_in_days: int | None = Field(None, ge=1, le=3650)


class ListMyApiKeys(BaseModel):
    """The asking user's API keys (a credential restricted to a project: that project's), never their secrets."""

    model_config = ConfigDict(extra="forbid")


class RevokeMyApiKey(BaseModel):
    """Revoke one of the asking user's API keys (a credential restricted to a project: of that project)."""

    model_config = ConfigDict(extra="forbid")

    key_id: UUID


class RevokeApiKey(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key_id: UUID


class ListApiKeys(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: str | None = Field(None, pattern=USER_ID_PATTERN)


class ApiKeyView(BaseModel):
    key_id: UUID
    user_id: str
    name: str
    prefix: str
    scopes: list[Scope]
    project: str | None
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None


class CreatedApiKey(BaseModel):
    key: str | None = Field(description="the secret, shown once; null when replaying a command")
    view: ApiKeyView


class ApiKeyList(BaseModel):
    keys: list[ApiKeyView]


class IntrospectToken(BaseModel):
    """Ask auth whether a bearer token is valid, and for whom."""

    model_config = ConfigDict(extra="forbid")

    token: str = Field(min_length=1, max_length=4096)


class TokenInfo(BaseModel):
    active: bool
    tenant: str | None = None
    key_id: UUID | None = None
    client_id: str | None = None
    scopes: list[str] = Field(default_factory=list)
    project: str | None = None
    expires_at: int | None = None
    resource: str | None = Field(
        None, description="RFC 8707 audience: the MCP URL an OAuth token was issued for; null for API keys"
    )
    grant_id: str | None = Field(None, description="the OAuth grant (token family) this token belongs to")
    user_name: str | None = Field(None, description="the user's display name")


class CreateUser(BaseModel):
    """Create a user who signs in with a password (or give an existing user a login).

    The password travels already hashed (``scrypt$…``, made by the CLI), never in clear text.
    """

    model_config = ConfigDict(extra="forbid")

    username: str = Field(pattern=USERNAME_PATTERN)
    password_hash: str = Field(pattern=r"^scrypt\$[0-9]{1,2}\$[0-9]{1,2}\$[0-9]{1,2}\$[A-Za-z0-9_-]{16,64}\$[A-Za-z0-9_-]{32,128}$")
    user_id: str | None = Field(None, pattern=USER_ID_PATTERN, description="attach the login to this existing user")
    display_name: str | None = Field(None, min_length=1, max_length=200)


class DisableUser(BaseModel):
    """Disable a user: every API key and OAuth token of theirs stops working at once."""

    model_config = ConfigDict(extra="forbid")

    user_id: str = Field(pattern=USER_ID_PATTERN)


class ListUsers(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UserView(BaseModel):
    user_id: str
    username: str | None
    name: str
    disabled: bool
    created_at: datetime


class UserList(BaseModel):
    users: list[UserView]


class AuthEventType(StrEnum):
    API_KEY_CREATED = "ApiKeyCreated"
    API_KEY_REVOKED = "ApiKeyRevoked"
    TOKEN_REVOKED = "TokenRevoked"  # aggregate "oauthgrant", id = the grant: all its tokens are dead
    USER_DEACTIVATED = "UserDeactivated"  # aggregate "user", id = the user id


class GrantRevokedState(BaseModel):
    """The ``data`` of a ``TokenRevoked`` event: an OAuth grant (and every token of it) revoked."""

    model_config = ConfigDict(extra="forbid")

    grant_id: UUID
    user_id: str
    reason: str


class UserDeactivatedState(BaseModel):
    """The ``data`` of a ``UserDeactivated`` event: every key and token of the user stops working."""

    model_config = ConfigDict(extra="forbid")

    user_id: str


#: auth's aggregates on the event log (the gateways listen to them to drop cached credentials at once)
API_KEY_AGGREGATE = aggregate("apikey", AUTH, ApiKeyView, (AuthEventType.API_KEY_CREATED, AuthEventType.API_KEY_REVOKED))
GRANT_AGGREGATE = aggregate("oauthgrant", AUTH, GrantRevokedState, (AuthEventType.TOKEN_REVOKED,))
USER_AGGREGATE = aggregate("user", AUTH, UserDeactivatedState, (AuthEventType.USER_DEACTIVATED,))


for _name, _model, _result in (
    ("create_api_key", CreateApiKey, CreatedApiKey),
    ("revoke_api_key", RevokeApiKey, ApiKeyView),
    ("create_my_api_key", CreateMyApiKey, CreatedApiKey),
    ("revoke_my_api_key", RevokeMyApiKey, ApiKeyView),
    ("create_user", CreateUser, UserView),
    ("disable_user", DisableUser, UserView),
):
    command(AUTH, _name, result=_result)(_model)
for _name, _model, _result in (
    ("introspect", IntrospectToken, TokenInfo),
    ("list_api_keys", ListApiKeys, ApiKeyList),
    ("list_my_api_keys", ListMyApiKeys, ApiKeyList),
    ("list_users", ListUsers, UserList),
):
    query(AUTH, _name, result=_result)(_model)

del _name, _model, _result

COMMANDS: dict[str, type[BaseModel]] = {name: spec.model for name, spec in messages_of(AUTH, "command").items()}
QUERIES: dict[str, type[BaseModel]] = {name: spec.model for name, spec in messages_of(AUTH, "query").items()}


def canonical_resource(uri: str) -> str:
    """An RFC 8707 resource as compared by auth and gateway alike: lower-case scheme and host, no
    default port, no trailing slash."""
    parts = urlsplit(uri.strip())
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    if port is not None and (scheme, port) not in (("https", 443), ("http", 80)):
        host = f"{host}:{port}"
    query = f"?{parts.query}" if parts.query else ""
    return f"{scheme}://{host}{parts.path.rstrip('/')}{query}"


def same_resource(a: str | None, b: str | None) -> bool:
    """Whether two resource indicators name the same resource (False when either is missing)."""
    if not a or not b:
        return False
    try:
        return canonical_resource(a) == canonical_resource(b)
    except ValueError:
        return False
