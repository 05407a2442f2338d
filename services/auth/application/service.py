"""Auth use cases: create and revoke API keys, create and disable users, list them, introspect
bearer tokens (API keys and OAuth access tokens)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any
from uuid import NAMESPACE_URL, uuid5

from pydantic import BaseModel

from contracts.auth import (
    API_KEY_AGGREGATE,
    OAUTH_ACCESS_TOKEN_PREFIX,
    ApiKeyList,
    ApiKeyView,
    AuthEventType,
    CreateApiKey,
    CreatedApiKey,
    CreateMyApiKey,
    CreateUser,
    DisableUser,
    IntrospectToken,
    ListApiKeys,
    ListMyApiKeys,
    ListUsers,
    RevokeApiKey,
    RevokeMyApiKey,
    Scope,
    TokenInfo,
    UserList,
    UserView,
)
from contracts.envelope import EventEnvelope, utcnow
from contracts.errors import ErrorCode, ServiceError
from contracts.portability import PurgeAuthUser, RestoreAuthUser
from contracts.subjects import Names
from kit.service import Call, CommandCall
from services.auth.adapters.oauth_store import OAuthStore
from services.auth.adapters.pg_store import AuthStore
from services.auth.adapters.purge_store import PgAuthPurge
from services.auth.application.events import AuthEvents, EventLog
from services.auth.application.purge import AuthPurge
from services.auth.domain import keys, passwords
from services.auth.domain import oauth as oauth_rules

log = logging.getLogger("engram.auth")


__all__ = ["AuthService", "EventLog"]


def _portability(handlers: AuthPurge) -> dict[type[BaseModel], Any]:
    return {PurgeAuthUser: handlers.purge, RestoreAuthUser: handlers.restore_user}


class AuthService:
    def __init__(self, store: AuthStore, events: EventLog, names: Names, oauth: OAuthStore | None = None) -> None:
        self.store = store
        self.events = events
        self.names = names
        self.oauth = oauth or OAuthStore(store.pool, store.s)
        self.auth_events = AuthEvents(events, names)

    def command_handlers(self) -> dict[type[BaseModel], Any]:
        return {CreateApiKey: self.create_key, RevokeApiKey: self.revoke_key, CreateMyApiKey: self.create_my_key,
                RevokeMyApiKey: self.revoke_my_key, CreateUser: self.create_user,
                DisableUser: self.disable_user,
                **_portability(AuthPurge(PgAuthPurge(self.store.pool, self.store.s), self.auth_events))}

    def query_handlers(self) -> dict[type[BaseModel], Any]:
        return {IntrospectToken: self.introspect_query, ListApiKeys: self.list_keys, ListMyApiKeys: self.list_my_keys,
                ListUsers: self.list_users}

    async def create_key(self, call: CommandCall, cmd: CreateApiKey) -> CreatedApiKey:
        """Create an API key (and its user when no user_id is given); the secret is in this result only."""
        if cmd.user_id is not None and not await self.store.user_exists(cmd.user_id):
            raise ServiceError(f"no user {cmd.user_id}; omit user_id to create one", "user_id", code=ErrorCode.NOT_FOUND)
        new = keys.generate_key()
        key_id = uuid5(NAMESPACE_URL, f"engram:apikey:{call.command_id}")
        user_id = cmd.user_id or "u" + uuid5(NAMESPACE_URL, f"engram:user:{call.command_id}").hex
        now = utcnow()
        created, inserted = await self.store.create_key(
            user_id=user_id, user_name=cmd.user_name, create_user=cmd.user_id is None, key_id=key_id,
            name=cmd.name, prefix=new.display_prefix, key_hash=new.hash, scopes=[s.value for s in cmd.scopes],
            project=cmd.project, expires_at=keys.expiry(now, cmd.expires_in_days),
        )
        await self._emit(call, created, AuthEventType.API_KEY_CREATED, now)
        # The secret is in the first reply only; the stored outcome (for retries) never holds it.
        call.stored_result = CreatedApiKey(key=None, view=created)
        return CreatedApiKey(key=new.secret if inserted else None, view=created)

    async def revoke_key(self, call: CommandCall, cmd: RevokeApiKey) -> ApiKeyView:
        """Revoke an API key: every gateway refuses it at once."""
        revoked = await self.store.revoke_key(cmd.key_id)
        if revoked is None:
            raise ServiceError(f"no API key {cmd.key_id}", "key_id", code=ErrorCode.NOT_FOUND)
        await self._emit(call, revoked, AuthEventType.API_KEY_REVOKED, utcnow())
        return revoked

    async def create_my_key(self, call: CommandCall, cmd: CreateMyApiKey) -> CreatedApiKey:
        """A key of the caller's own (``call.tenant``), restricted to the caller's project when the
        caller is restricted to one (a key naming another project is refused). That its scopes are
        the asking credential's is the gateway's check: it alone knows them."""
        project = cmd.project
        if call.project_scope is not None:
            if project is not None and project != call.project_scope:
                raise ServiceError(f"this credential is restricted to project '{call.project_scope}': a key it "
                                   f"creates is too", "project", code=ErrorCode.PERMISSION_DENIED)
            project = call.project_scope
        return await self.create_key(call, CreateApiKey(
            user_id=call.tenant, name=cmd.name, scopes=[Scope(s) for s in cmd.scopes], project=project,
            expires_in_days=cmd.expires_in_days))

    async def _own_keys(self, call: Call) -> list[ApiKeyView]:
        """The caller's keys within reach (a restricted caller: its project's only)."""
        return [k for k in await self.store.list_keys(call.tenant)
                if call.project_scope is None or k.project == call.project_scope]

    async def list_my_keys(self, call: Call, _: ListMyApiKeys) -> ApiKeyList:
        return ApiKeyList(keys=await self._own_keys(call))

    async def revoke_my_key(self, call: CommandCall, cmd: RevokeMyApiKey) -> ApiKeyView:
        """Revoke one of the caller's keys; another user's, or one outside the caller's project, is not
        found (nothing says it exists)."""
        if not any(k.key_id == cmd.key_id for k in await self._own_keys(call)):
            raise ServiceError(f"no API key {cmd.key_id}", "key_id", code=ErrorCode.NOT_FOUND)
        return await self.revoke_key(call, RevokeApiKey(key_id=cmd.key_id))

    async def create_user(self, call: CommandCall, cmd: CreateUser) -> UserView:
        """Create a user who signs in with a password, or give an existing user a login."""
        if not passwords.is_valid_hash(cmd.password_hash):
            raise ServiceError("unsupported password hash parameters", "password_hash")
        existing = cmd.user_id is not None
        if existing and not await self.store.user_exists(cmd.user_id or ""):
            raise ServiceError(f"no user {cmd.user_id}", "user_id", code=ErrorCode.NOT_FOUND)
        user_id = cmd.user_id or "u" + uuid5(NAMESPACE_URL, f"engram:user:{call.command_id}").hex
        user = await self.oauth.create_login(
            user_id=user_id, username=cmd.username, password_hash=cmd.password_hash,
            display_name=cmd.display_name, existing=existing,
        )
        if user is None:
            raise ServiceError(f"the username {cmd.username!r} is taken", "username", code=ErrorCode.CONFLICT)
        log.info("user %s can now sign in as %s", user.user_id, user.username)
        return user

    async def disable_user(self, call: CommandCall, cmd: DisableUser) -> UserView:
        """Disable a user: every API key and OAuth token of theirs stops working at once."""
        done = await self.oauth.disable_user(cmd.user_id)
        if done is None:
            raise ServiceError(f"no user {cmd.user_id}", "user_id", code=ErrorCode.NOT_FOUND)
        user, grants = done
        await self.auth_events.user_deactivated(
            user.user_id, call.command_id, event_id=uuid5(NAMESPACE_URL, f"engram:event:{call.command_id}")
        )
        log.info("user %s disabled; %d OAuth grants revoked", user.user_id, len(grants))
        return user

    async def _emit(self, call: CommandCall, key: ApiKeyView, type_: AuthEventType, now: datetime) -> None:
        event = EventEnvelope(
            event_id=uuid5(NAMESPACE_URL, f"engram:event:{call.command_id}"),
            type=type_.value, occurred_at=now, tenant=key.user_id, aggregate=API_KEY_AGGREGATE,
            aggregate_id=str(key.key_id), correlation_id=call.correlation_id, causation_id=call.command_id,
            data=key.model_dump(mode="json"),
        )
        await self.events.append_event(
            self.names.event(key.user_id, API_KEY_AGGREGATE, str(key.key_id)), event, expected_last_seq=None
        )

    async def introspect(self, token: str) -> TokenInfo:
        """Is this bearer token an active API key or OAuth access token, and whose? Unknown tokens
        are simply inactive."""
        if token.startswith(OAUTH_ACCESS_TOKEN_PREFIX):
            return await self._introspect_oauth(token)
        if not keys.looks_like_key(token):
            return TokenInfo(active=False)
        found = await self.store.find_by_hash(keys.hash_key(token))
        if found is None:
            return TokenInfo(active=False)
        key, user_disabled, user_name = found
        if not keys.is_usable(key.revoked_at, key.expires_at, user_disabled, utcnow()):
            return TokenInfo(active=False)
        await self.store.touch(key.key_id)
        return TokenInfo(
            active=True, tenant=key.user_id, key_id=key.key_id, client_id=f"apikey:{key.key_id}",
            # (admin is install-wide: a key that somehow holds it with a project restriction gets neither)
            scopes=[s.value for s in key.scopes if not (key.project and s is Scope.ADMIN)], project=key.project,
            expires_at=int(key.expires_at.timestamp()) if key.expires_at else None, user_name=user_name,
        )

    async def _introspect_oauth(self, token: str) -> TokenInfo:
        if not oauth_rules.looks_like(token, OAUTH_ACCESS_TOKEN_PREFIX):
            return TokenInfo(active=False)
        row = await self.oauth.find_access_token(oauth_rules.hash_secret(token))
        if row is None or row.revoked or row.user_disabled or row.expires_at <= utcnow():
            return TokenInfo(active=False)
        return TokenInfo(
            active=True, tenant=row.user_id, client_id=row.client_id, scopes=row.scopes,
            expires_at=int(row.expires_at.timestamp()), resource=row.resource, grant_id=str(row.grant_id),
            user_name=row.user_name,
        )

    async def introspect_query(self, _: Call, q: IntrospectToken) -> TokenInfo:
        return await self.introspect(q.token)

    async def list_keys(self, _: Call, q: ListApiKeys) -> ApiKeyList:
        return ApiKeyList(keys=await self.store.list_keys(q.user_id))

    async def list_users(self, _: Call, __: ListUsers) -> UserList:
        return UserList(users=await self.oauth.list_users())
