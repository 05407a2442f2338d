"""The `mcp` SDK's ``OAuthAuthorizationServerProvider``, backed by Postgres.

The SDK's handlers (``mcp.server.auth.handlers``) parse and validate the protocol messages
(authorize, token, register, revoke), check PKCE S256, code expiry, redirect_uri equality and
client authentication; this provider stores and issues: pending authorization requests, codes,
grants (token families), access and refresh tokens, all hashed.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from contextvars import ContextVar
from typing import Any
from urllib.parse import unquote
from uuid import UUID, uuid4

from mcp.server.auth.middleware.client_auth import ClientAuthenticator
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
    RegistrationError,
    TokenError,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl
from starlette.requests import Request

from contracts.auth import (
    DEFAULT_OAUTH_SCOPES,
    OAUTH_ACCESS_TOKEN_PREFIX,
    OAUTH_CODE_PREFIX,
    OAUTH_REFRESH_TOKEN_PREFIX,
)
from contracts.envelope import utcnow
from services.auth.adapters.oauth_store import OAuthStore
from services.auth.application.events import AuthEvents
from services.auth.domain import oauth as rules
from services.auth.oauth.logsafe import LogSafeFilter

log = logging.getLogger("engram.auth.oauth")
log.addFilter(LogSafeFilter())
CLIENT_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MAX_STATE_CHARS = 2048

# The client secret presented with the current token/revocation request, so that ``get_client``
# can compare it with the stored hash (the SDK's authenticator compares plain strings).
_presented_secret: ContextVar[str | None] = ContextVar("presented_client_secret", default=None)
# The RFC 8707 ``resource`` of the current token request (the SDK's token handler parses it but
# does not pass it on); the provider refuses a code or refresh token for another one.
requested_resource: ContextVar[str | None] = ContextVar("requested_resource", default=None)


class EngramCode(AuthorizationCode):
    code_hash: str


class EngramRefreshToken(RefreshToken):
    grant_id: UUID
    token_hash: str


class EngramAccessToken(AccessToken):
    grant_id: UUID


async def _presented(request: Request) -> str | None:
    form = await request.form()
    value = form.get("client_secret")
    if isinstance(value, str):
        return value
    header = request.headers.get("authorization", "")
    if header[:6].lower() == "basic ":
        try:
            decoded = base64.b64decode(header[6:], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
        if ":" in decoded:
            return unquote(decoded.split(":", 1)[1])
    return None


class HashedSecretAuthenticator(ClientAuthenticator):
    """The SDK's client authentication, against secrets stored as hashes."""

    async def authenticate_request(self, request: Request) -> OAuthClientInformationFull:
        token = _presented_secret.set(await _presented(request))
        try:
            return await super().authenticate_request(request)
        finally:
            _presented_secret.reset(token)


class EngramOAuthProvider:
    def __init__(self, store: OAuthStore, events: AuthEvents, *, issuer: str, resource: str) -> None:
        self.store = store
        self.events = events
        self.issuer = issuer.rstrip("/")
        self.resource = resource
        self.metadata_limits = rules.MetadataLimits()
        self.app_schemes: tuple[str, ...] = rules.KNOWN_APP_SCHEMES

    def configure(self, *, metadata_limits: rules.MetadataLimits, app_schemes: tuple[str, ...]) -> None:
        """The registration limits from the settings (``create_app`` passes them on)."""
        self.metadata_limits = metadata_limits
        self.app_schemes = app_schemes

    # clients (RFC 7591) ----------------------------------------------------------------------
    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        if not CLIENT_ID.match(client_id):
            return None
        found = await self.store.get_client(client_id)
        if found is None:
            return None
        metadata, secret_hash = found
        secret = None
        if secret_hash is not None:
            presented = _presented_secret.get()
            # The right secret, or one nobody can present: the SDK's compare then fails.
            secret = presented if presented and rules.same_secret(presented, secret_hash) else "!" + rules.new_secret()
        return OAuthClientInformationFull.model_validate({**metadata, "client_id": client_id, "client_secret": secret})

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        uris = [str(u) for u in client_info.redirect_uris or []]
        if not uris:
            raise RegistrationError("invalid_redirect_uri", "register at least one redirect_uri")
        metadata = client_info.model_dump(mode="json", exclude={"client_secret", "client_id"}, exclude_none=True)
        problem = rules.metadata_problem(metadata, self.metadata_limits)
        if problem:
            log.warning("client registration refused: %s", problem)
            raise RegistrationError("invalid_client_metadata", problem)
        for uri in uris:
            problem = rules.redirect_uri_problem(uri, self.app_schemes)
            if problem:
                raise RegistrationError("invalid_redirect_uri", f"{uri}: {problem}")
        secret_hash = rules.hash_secret(client_info.client_secret) if client_info.client_secret else None
        await self.store.save_client(client_info.client_id, metadata, secret_hash)
        log.info("registered OAuth client %s (%s)", client_info.client_id,
                 rules.log_safe(client_info.client_name or "unnamed"))

    # authorization ----------------------------------------------------------------------------
    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        redirect_uri = str(params.redirect_uri)
        if not rules.redirect_uri_registered(redirect_uri, [str(u) for u in client.redirect_uris or []]):
            raise AuthorizeError("invalid_request", "redirect_uri is not registered for this client")
        if not rules.valid_challenge(params.code_challenge):
            raise AuthorizeError("invalid_request", "code_challenge must be an S256 challenge (43 base64url characters)")
        if params.state is not None and (len(params.state) > MAX_STATE_CHARS or "\x00" in params.state):
            raise AuthorizeError("invalid_request", "state is too long or malformed")
        problem = rules.resource_problem(params.resource, self.resource)
        if problem:
            raise AuthorizeError("invalid_target", problem)
        scopes = rules.grantable_scopes(params.scopes, client.scope, [s.value for s in DEFAULT_OAUTH_SCOPES])
        if scopes is None:
            raise AuthorizeError("invalid_scope", f"scopes available through OAuth: {' '.join(rules.VALID_OAUTH_SCOPES)}")
        request_id = rules.new_secret()
        await self.store.create_request(
            request_id=request_id, client_id=client.client_id, redirect_uri=redirect_uri,
            explicit=params.redirect_uri_provided_explicitly, scopes=scopes, code_challenge=params.code_challenge,
            state=params.state, resource=self.resource, expires_at=utcnow() + rules.REQUEST_TTL,
        )
        return f"{self.issuer}/consent?request={request_id}"

    async def load_authorization_code(self, client: OAuthClientInformationFull, authorization_code: str) -> EngramCode | None:
        if not rules.looks_like(authorization_code, OAUTH_CODE_PREFIX):
            return None
        code_hash = rules.hash_secret(authorization_code)
        row = await self.store.find_code(code_hash)
        if row is None or row["client_id"] != client.client_id:
            return None
        if row["used_at"] is not None:
            # RFC 6749 §4.1.2 / OAuth 2.1 §4.1.3: a code used twice revokes what it produced.
            log.warning("authorization code replayed (client %s); revoking its grant", client.client_id)
            if row["grant_id"] is not None:
                await self.revoke_grant(row["grant_id"], "authorization code replayed")
            return None
        return EngramCode(
            code=authorization_code, code_hash=code_hash, scopes=list(row["scopes"]),
            expires_at=row["expires_at"].timestamp(), client_id=row["client_id"], code_challenge=row["code_challenge"],
            redirect_uri=AnyUrl(row["redirect_uri"]), redirect_uri_provided_explicitly=row["redirect_uri_explicit"],
            resource=row["resource"], subject=row["user_id"],
        )

    def _check_resource(self, granted: str | None) -> None:
        """RFC 8707 §2.2: a ``resource`` at the token endpoint must be the one the grant is for."""
        problem = rules.resource_problem(requested_resource.get(), granted or self.resource)
        if problem:
            raise TokenError("invalid_target", problem)

    async def exchange_authorization_code(self, client: OAuthClientInformationFull, authorization_code: EngramCode) -> OAuthToken:
        self._check_resource(authorization_code.resource)
        access, refresh, now = rules.new_access_token(), rules.new_refresh_token(), utcnow()
        redeemed = await self.store.redeem_code(
            code_hash=authorization_code.code_hash, grant_id=uuid4(),
            access_hash=rules.hash_secret(access), access_expires=now + rules.ACCESS_TOKEN_TTL,
            refresh_hash=rules.hash_secret(refresh), refresh_expires=now + rules.REFRESH_TOKEN_TTL,
        )
        if not redeemed:
            log.warning("authorization code used concurrently (client %s)", client.client_id)
            grant = await self.store.grant_of_code(authorization_code.code_hash)
            if grant is not None:
                await self.revoke_grant(grant, "authorization code replayed")
            raise TokenError("invalid_grant", "authorization code already used")
        return self._token_response(access, refresh, authorization_code.scopes)

    def _token_response(self, access: str, refresh: str, scopes: list[str]) -> OAuthToken:
        return OAuthToken(
            access_token=access, token_type="Bearer", expires_in=int(rules.ACCESS_TOKEN_TTL.total_seconds()),
            scope=" ".join(scopes), refresh_token=refresh,
        )

    # refresh tokens: rotation with reuse detection ------------------------------------------
    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> EngramRefreshToken | None:
        if not rules.looks_like(refresh_token, OAUTH_REFRESH_TOKEN_PREFIX):
            return None
        token_hash = rules.hash_secret(refresh_token)
        row = await self.store.find_refresh_token(token_hash)
        if row is None:
            return None
        state = rules.RefreshState(row.client_id, row.expires_at, row.rotated_at, row.revoked, row.user_disabled)
        verdict = rules.refresh_verdict(state, client.client_id, utcnow())
        if verdict is rules.RefreshVerdict.REUSED:
            log.warning("rotated refresh token reused (client %s, grant %s); revoking the grant", client.client_id, row.grant_id)
            await self.revoke_grant(row.grant_id, "refresh token reused")
            return None
        if verdict is not rules.RefreshVerdict.OK:
            return None
        return EngramRefreshToken(
            token=refresh_token, token_hash=token_hash, client_id=row.client_id, scopes=row.scopes,
            expires_at=int(row.expires_at.timestamp()), resource=row.resource, subject=row.user_id, grant_id=row.grant_id,
        )

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: EngramRefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self._check_resource(refresh_token.resource)
        access, refresh, now = rules.new_access_token(), rules.new_refresh_token(), utcnow()
        rotated = await self.store.rotate_refresh_token(
            old_hash=refresh_token.token_hash, grant_id=refresh_token.grant_id,
            access_scopes=scopes, refresh_scopes=refresh_token.scopes,  # RFC 6749 §6: same scope as the old one
            access_hash=rules.hash_secret(access), access_expires=now + rules.ACCESS_TOKEN_TTL,
            refresh_hash=rules.hash_secret(refresh), refresh_expires=now + rules.REFRESH_TOKEN_TTL,
        )
        if not rotated:
            log.warning("refresh token spent concurrently (client %s); revoking the grant", client.client_id)
            await self.revoke_grant(refresh_token.grant_id, "refresh token reused")
            raise TokenError("invalid_grant", "refresh token already used")
        return self._token_response(access, refresh, scopes)

    # access tokens and revocation (RFC 7009) --------------------------------------------------
    async def load_access_token(self, token: str) -> EngramAccessToken | None:
        if not rules.looks_like(token, OAUTH_ACCESS_TOKEN_PREFIX):
            return None
        row = await self.store.find_access_token(rules.hash_secret(token))
        if row is None or row.revoked or row.user_disabled or row.expires_at <= utcnow():
            return None
        return EngramAccessToken(
            token=token, client_id=row.client_id, scopes=row.scopes, expires_at=int(row.expires_at.timestamp()),
            resource=row.resource, subject=row.user_id, grant_id=row.grant_id,
        )

    async def revoke_token(self, token: Any) -> None:
        """Revoking either token of a grant revokes the whole grant (its family)."""
        grant_id = getattr(token, "grant_id", None)
        if grant_id is not None:
            await self.revoke_grant(grant_id, "revoked by the client")

    async def revoke_grant(self, grant_id: UUID, reason: str) -> None:
        user_id = await self.store.revoke_grant(grant_id, reason)
        if user_id is not None:
            log.info("OAuth grant %s revoked: %s", grant_id, reason)
            try:
                await self.events.grant_revoked(user_id, grant_id, reason)
            except Exception:  # the grant is revoked in Postgres either way; caches expire within their TTL
                log.exception("could not publish the revocation of grant %s", grant_id)

    async def exchange_identity_assertion(self, client: OAuthClientInformationFull, params: Any) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "the JWT bearer grant is not supported")
