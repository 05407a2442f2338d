"""Auth use cases: create and revoke API keys, create and disable users, list them, introspect
bearer tokens (API keys and OAuth access tokens)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any
from uuid import NAMESPACE_URL, uuid5

from pydantic import ValidationError

from contracts.auth import (
    OAUTH_ACCESS_TOKEN_PREFIX,
    ApiKeyList,
    ApiKeyView,
    AuthEventType,
    CreateApiKey,
    CreatedApiKey,
    CreateUser,
    DisableUser,
    IntrospectToken,
    ListApiKeys,
    RevokeApiKey,
    TokenInfo,
    UserList,
)
from contracts.envelope import CommandEnvelope, EventEnvelope, QueryEnvelope, Reply, utcnow
from contracts.errors import ErrorCode
from contracts.subjects import Names
from kit.bus import validation_reply
from services.auth.adapters.oauth_store import OAuthStore
from services.auth.adapters.pg_store import AuthStore
from services.auth.application.events import AuthEvents, EventLog
from services.auth.domain import keys, passwords
from services.auth.domain import oauth as oauth_rules

log = logging.getLogger("engram.auth")
AGGREGATE = "apikey"


__all__ = ["AuthService", "EventLog"]


class AuthService:
    def __init__(self, store: AuthStore, events: EventLog, names: Names, oauth: OAuthStore | None = None) -> None:
        self.store = store
        self.events = events
        self.names = names
        self.oauth = oauth or OAuthStore(store.pool, store.s)
        self.auth_events = AuthEvents(events, names)

    async def handle_command(self, env: CommandEnvelope) -> Reply[Any]:
        """Create or revoke an API key, once per idempotency key."""
        prior = await self.store.outcome(env.command_id)
        if prior is not None:
            return prior
        try:
            if env.type == "create_api_key":
                reply = await self._create(env, CreateApiKey.model_validate(env.payload))
            elif env.type == "revoke_api_key":
                reply = await self._revoke(env, RevokeApiKey.model_validate(env.payload))
            elif env.type == "create_user":
                reply = await self._create_user(env, CreateUser.model_validate(env.payload))
            elif env.type == "disable_user":
                reply = await self._disable_user(env, DisableUser.model_validate(env.payload))
            else:
                reply = Reply.failure(ErrorCode.INVALID_ARGUMENT, f"unknown command {env.type!r}", "type")
        except ValidationError as exc:
            reply = validation_reply(exc)
        if not reply.ok or env.type != "create_api_key":
            await self.store.record_outcome(self.store.pool, env.command_id, env.type, reply)
        return reply

    async def _create(self, env: CommandEnvelope, cmd: CreateApiKey) -> Reply[Any]:
        if cmd.user_id is not None and not await self.store.user_exists(cmd.user_id):
            return Reply.failure(ErrorCode.NOT_FOUND, f"no user {cmd.user_id}; omit user_id to create one", "user_id")
        new = keys.generate_key()
        key_id = uuid5(NAMESPACE_URL, f"engram:apikey:{env.command_id}")
        user_id = cmd.user_id or "u" + uuid5(NAMESPACE_URL, f"engram:user:{env.command_id}").hex
        now = utcnow()
        created, inserted = await self.store.create_key(
            user_id=user_id, user_name=cmd.user_name, create_user=cmd.user_id is None, key_id=key_id,
            name=cmd.name, prefix=new.display_prefix, key_hash=new.hash, scopes=[s.value for s in cmd.scopes],
            project=cmd.project, expires_at=keys.expiry(now, cmd.expires_in_days),
        )
        await self._emit(env, created, AuthEventType.API_KEY_CREATED, now)
        # The secret is in the first reply only; the stored outcome (for retries) never holds it.
        await self.store.record_outcome(
            self.store.pool, env.command_id, env.type,
            Reply.success(CreatedApiKey(key=None, view=created).model_dump(mode="json")),
        )
        return Reply.success(CreatedApiKey(key=new.secret if inserted else None, view=created).model_dump(mode="json"))

    async def _revoke(self, env: CommandEnvelope, cmd: RevokeApiKey) -> Reply[Any]:
        revoked = await self.store.revoke_key(cmd.key_id)
        if revoked is None:
            return Reply.failure(ErrorCode.NOT_FOUND, f"no API key {cmd.key_id}", "key_id")
        await self._emit(env, revoked, AuthEventType.API_KEY_REVOKED, utcnow())
        return Reply.success(revoked.model_dump(mode="json"))

    async def _create_user(self, env: CommandEnvelope, cmd: CreateUser) -> Reply[Any]:
        if not passwords.is_valid_hash(cmd.password_hash):
            return Reply.failure(ErrorCode.INVALID_ARGUMENT, "unsupported password hash parameters", "password_hash")
        existing = cmd.user_id is not None
        if existing and not await self.store.user_exists(cmd.user_id or ""):
            return Reply.failure(ErrorCode.NOT_FOUND, f"no user {cmd.user_id}", "user_id")
        user_id = cmd.user_id or "u" + uuid5(NAMESPACE_URL, f"engram:user:{env.command_id}").hex
        user = await self.oauth.create_login(
            user_id=user_id, username=cmd.username, password_hash=cmd.password_hash,
            display_name=cmd.display_name, existing=existing,
        )
        if user is None:
            return Reply.failure(ErrorCode.CONFLICT, f"the username {cmd.username!r} is taken", "username")
        log.info("user %s can now sign in as %s", user.user_id, user.username)
        return Reply.success(user.model_dump(mode="json"))

    async def _disable_user(self, env: CommandEnvelope, cmd: DisableUser) -> Reply[Any]:
        done = await self.oauth.disable_user(cmd.user_id)
        if done is None:
            return Reply.failure(ErrorCode.NOT_FOUND, f"no user {cmd.user_id}", "user_id")
        user, grants = done
        await self.auth_events.user_deactivated(
            user.user_id, env.command_id, event_id=uuid5(NAMESPACE_URL, f"engram:event:{env.command_id}")
        )
        log.info("user %s disabled; %d OAuth grants revoked", user.user_id, len(grants))
        return Reply.success(user.model_dump(mode="json"))

    async def _emit(self, env: CommandEnvelope, key: ApiKeyView, type_: AuthEventType, now: datetime) -> None:
        event = EventEnvelope(
            event_id=uuid5(NAMESPACE_URL, f"engram:event:{env.command_id}"),
            type=type_.value, occurred_at=now, tenant=key.user_id, aggregate=AGGREGATE,
            aggregate_id=str(key.key_id), correlation_id=env.correlation_id, causation_id=env.command_id,
            data=key.model_dump(mode="json"),
        )
        await self.events.append_event(
            self.names.event(key.user_id, AGGREGATE, str(key.key_id)), event, expected_last_seq=None
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
        key, user_disabled = found
        if not keys.is_usable(key.revoked_at, key.expires_at, user_disabled, utcnow()):
            return TokenInfo(active=False)
        await self.store.touch(key.key_id)
        return TokenInfo(
            active=True, tenant=key.user_id, key_id=key.key_id, client_id=f"apikey:{key.key_id}",
            scopes=[s.value for s in key.scopes], project=key.project,
            expires_at=int(key.expires_at.timestamp()) if key.expires_at else None,
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
        )

    async def handle_query(self, query: QueryEnvelope) -> Reply[Any]:
        try:
            if query.type == "introspect":
                info = await self.introspect(IntrospectToken.model_validate(query.payload).token)
                return Reply.success(info.model_dump(mode="json"))
            if query.type == "list_api_keys":
                listing = ApiKeyList(keys=await self.store.list_keys(ListApiKeys.model_validate(query.payload).user_id))
                return Reply.success(listing.model_dump(mode="json"))
            if query.type == "list_users":
                return Reply.success(UserList(users=await self.oauth.list_users()).model_dump(mode="json"))
            if query.type == "command_outcome":
                outcome = await self.store.outcome(str(query.payload.get("command_id", "")))
                if outcome is None:
                    return Reply.failure(ErrorCode.NOT_FOUND, "no outcome yet")
                return Reply.success({"outcome": outcome.model_dump(mode="json")})
        except ValidationError as exc:
            return validation_reply(exc)
        return Reply.failure(ErrorCode.INVALID_ARGUMENT, f"unknown query {query.type!r}", "type")
