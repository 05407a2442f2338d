"""The auth service's HTTP face: an OAuth 2.1 authorization server built from the `mcp` SDK's
handlers (RFC 8414 metadata, authorize, token, RFC 7591 registration) around our Postgres-backed
provider, our RFC 7009 revocation endpoint, plus the sign-in, consent, sign-out and sign-up pages.

In front of all of it, :class:`AddressAndLimits` decides which address a request comes from
(X-Forwarded-For only from ``ENGRAM_TRUSTED_PROXIES``) and rate-limits per address.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlsplit

from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.handlers.register import RegistrationHandler
from mcp.server.auth.handlers.token import TokenErrorResponse, TokenHandler
from mcp.server.auth.json_response import PydanticJSONResponse
from mcp.server.auth.middleware.client_auth import AuthenticationError
from mcp.server.auth.routes import build_metadata, cors_middleware
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, RequestBodyLimitMiddleware
from pydantic import AnyHttpUrl, ConfigDict, TypeAdapter
from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, request_response
from starlette.types import ASGIApp, Receive, Scope, Send

from contracts.auth import DEFAULT_OAUTH_SCOPES
from kit.edge import HostCheckMiddleware, TokenBuckets, TrustedProxies, address_key, header_deadline_protocol
from services.auth.config import AuthSettings
from services.auth.domain import oauth as rules
from services.auth.oauth.logsafe import LogSafeFilter
from services.auth.oauth.pages import Pages, too_many_requests_page
from services.auth.oauth.provider import EngramOAuthProvider, HashedSecretAuthenticator, requested_resource

log = logging.getLogger("engram.auth.http")
log.addFilter(LogSafeFilter())
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_URL = TypeAdapter(AnyHttpUrl, config=ConfigDict(url_preserve_empty_path=True))
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")
MAX_REGISTRATION_BODY = 64 * 1024
PAGE_PATHS = ("/login", "/consent", "/signup", "/logout")


def _safe(value: object, limit: int = 120) -> str:
    """Client input fit for a log line: printable ASCII only (no forged lines), bounded."""
    return _UNPRINTABLE.sub("?", str(value))[:limit]


def issuer_url(issuer: str) -> AnyHttpUrl:
    """The issuer exactly as configured (no trailing slash added): clients compare it as a string."""
    return _URL.validate_python(issuer.rstrip("/"))


def _cors(app: ASGIApp, methods: list[str]) -> ASGIApp:
    return CORSMiddleware(app=app, allow_origins="*", allow_methods=methods, allow_headers=["mcp-protocol-version"])


def _limited(app: ASGIApp, limit: int = DEFAULT_MAX_REQUEST_BODY_SIZE) -> ASGIApp:
    return RequestBodyLimitMiddleware(app, limit)


def _form_guard(handle: Any, what: str) -> Any:
    """A body that is not a parsable form is a 400 invalid_request, never a 500."""

    async def endpoint(request: Request) -> Response:
        try:
            await request.form()
        except Exception:
            log.warning("%s request refused: unreadable form body", what)
            return JSONResponse({"error": "invalid_request", "error_description": "the body must be a form"},
                                status_code=400, headers=NO_STORE)
        return await handle(request)

    return endpoint


def _token_endpoint(handler: TokenHandler) -> Any:
    """The SDK's token handler, with RFC 6749 §5.2's error for a redirect_uri mismatch
    (``invalid_grant``; the SDK says ``invalid_request``) and a log line per refusal (no secrets)."""

    async def endpoint(request: Request) -> Response:
        resource = (await request.form()).get("resource")
        token = requested_resource.set(resource if isinstance(resource, str) else None)
        try:
            response = await handler.handle(request)
        finally:
            requested_resource.reset(token)
        if response.status_code >= 400:
            try:
                body = json.loads(bytes(response.body))
            except ValueError:
                body = {}
            form = await request.form()
            log.warning("token request refused: %s (%s); grant_type=%s client=%s", _safe(body.get("error")),
                        _safe(body.get("error_description"), 200), _safe(form.get("grant_type"), 40),
                        _safe(form.get("client_id"), 64))
            if body.get("error") == "invalid_request" and "redirect_uri did not match" in str(body.get("error_description")):
                return PydanticJSONResponse(
                    content=TokenErrorResponse(error="invalid_grant", error_description="redirect_uri does not match "
                                               "the one of the authorization request"),
                    status_code=400, headers=NO_STORE,
                )
        return response

    return endpoint


def _revocation_endpoint(provider: EngramOAuthProvider, authenticator: HashedSecretAuthenticator) -> Any:
    """RFC 7009 revocation. The SDK's handler requires a ``client_secret`` field even from a
    public client (``token_endpoint_auth_method: none``, what MCP clients register), so their
    tokens could not be revoked; here a public client authenticates with its client_id alone
    (RFC 7009 §2.1, RFC 6749 §2.3) and a confidential one still needs its secret."""

    async def endpoint(request: Request) -> Response:
        form = await request.form()
        try:
            client = await authenticator.authenticate_request(request)
        except AuthenticationError as exc:
            log.warning("revocation refused: %s; client=%s", _safe(exc.message), _safe(form.get("client_id"), 64))
            return JSONResponse({"error": "invalid_client", "error_description": exc.message},
                                status_code=401, headers=NO_STORE)
        token = form.get("token")
        if not isinstance(token, str) or not token:
            return JSONResponse({"error": "invalid_request", "error_description": "token is required"},
                                status_code=400, headers=NO_STORE)
        loaders: list[Any] = [provider.load_access_token, partial(provider.load_refresh_token, client)]
        if form.get("token_type_hint") == "refresh_token":
            loaders.reverse()
        found = None
        for loader in loaders:
            found = await loader(token)
            if found is not None:
                break
        if found is not None and found.client_id == client.client_id:
            await provider.revoke_token(found)
        return Response(status_code=200, headers=NO_STORE)  # RFC 7009 §2.2: 200 for unknown tokens too

    return endpoint


def _authorize_endpoint(handler: AuthorizationHandler, pages: Pages, provider: EngramOAuthProvider,
                        issuer: str) -> Any:
    """The SDK's authorization endpoint, which redirects every error it can to the client's
    redirect URI. Anyone can register a client, so that is an open redirect (RFC 9700 §4.11.2):
    an error goes to the redirect URI only when ``rules.may_redirect_errors`` vouches for it
    (loopback, or a client the signed-in user has allowed); otherwise the user sees an error page."""
    consent = re.compile(re.escape(issuer.rstrip("/") + "/consent?request=") + r"[A-Za-z0-9_-]+")

    async def endpoint(request: Request) -> Response:
        response = await handler.handle(request)
        location = response.headers.get("location")
        if response.status_code not in (302, 303) or not location or consent.fullmatch(location):
            return response
        params = request.query_params if request.method == "GET" else await request.form()
        client_id = params.get("client_id")
        user_id = await pages.session_user(request)
        has_grant = bool(user_id and isinstance(client_id, str) and rules.looks_like_client_id(client_id)
                         and await provider.store.has_live_grant(client_id, user_id))
        if rules.may_redirect_errors(location, has_grant):
            return response
        query = parse_qs(urlsplit(location).query)
        error = query.get("error", ["invalid_request"])[0]
        description = query.get("error_description", [""])[0]
        log.warning("authorization request refused (%s: %s) with an error page, not a redirect to the "
                    "unvetted redirect URI of client %s", _safe(error, 40), _safe(description, 200),
                    _safe(client_id, 64))
        return pages.authorization_error(error, description)

    return endpoint


def oauth_routes(provider: EngramOAuthProvider, issuer: str, pages: Pages | None = None) -> list[Route]:
    """The SDK's authorization-server routes (as ``mcp.server.auth.routes.create_auth_routes``
    builds them) with these changes: client secrets are checked against stored hashes, the
    metadata advertises the RFC 9207 ``iss`` parameter our consent page sends, revocation
    accepts public clients, errors at /authorize are not redirected to unvetted clients, and
    registration bodies are small."""
    registration = ClientRegistrationOptions(
        enabled=True, valid_scopes=rules.VALID_OAUTH_SCOPES, default_scopes=[s.value for s in DEFAULT_OAUTH_SCOPES]
    )
    revocation = RevocationOptions(enabled=True)
    metadata = build_metadata(issuer_url(issuer), None, registration, revocation)
    metadata.authorization_response_iss_parameter_supported = True
    # Public clients (``none``: what MCP clients register) may use the token and revocation endpoints.
    metadata.token_endpoint_auth_methods_supported = ["none", "client_secret_post", "client_secret_basic"]
    metadata.revocation_endpoint_auth_methods_supported = ["none", "client_secret_post", "client_secret_basic"]
    authenticator = HashedSecretAuthenticator(provider)
    token = TokenHandler(provider, authenticator)
    authorize: Any = AuthorizationHandler(provider).handle
    if pages is not None:
        authorize = _authorize_endpoint(AuthorizationHandler(provider), pages, provider, issuer)
    return [
        Route("/.well-known/oauth-authorization-server",
              endpoint=cors_middleware(MetadataHandler(metadata).handle, ["GET", "OPTIONS"]), methods=["GET", "OPTIONS"]),
        Route("/authorize", endpoint=_limited(request_response(authorize)), methods=["GET", "POST"]),
        Route("/token", endpoint=_cors(_limited(request_response(_form_guard(_token_endpoint(token), "token"))),
                                       ["POST", "OPTIONS"]), methods=["POST", "OPTIONS"]),
        Route("/register", endpoint=_cors(_limited(request_response(RegistrationHandler(provider, registration).handle),
                                                   MAX_REGISTRATION_BODY), ["POST", "OPTIONS"]),
              methods=["POST", "OPTIONS"]),
        Route("/revoke", endpoint=_cors(_limited(request_response(
            _form_guard(_revocation_endpoint(provider, authenticator), "revocation"))), ["POST", "OPTIONS"]),
            methods=["POST", "OPTIONS"]),
    ]


def create_app(provider: EngramOAuthProvider, pages: Pages, issuer: str, settings: AuthSettings | None = None) -> ASGIApp:
    """The authorization server's ASGI app. ``settings`` (default: from the environment) gives
    the rate limits, trusted proxies and registration limits."""
    settings = settings or AuthSettings()
    provider.configure(metadata_limits=settings.metadata_limits, app_schemes=settings.app_schemes)

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    routes = oauth_routes(provider, issuer, pages) + [
        Route("/login", endpoint=_limited(request_response(_form_guard(pages.login, 'login'))), methods=["GET", "POST"]),
        Route("/consent", endpoint=_limited(request_response(_form_guard(pages.consent, 'consent'))), methods=["GET", "POST"]),
        Route("/signup", endpoint=_limited(request_response(_form_guard(pages.signup, 'signup'))), methods=["GET", "POST"]),
        Route("/logout", endpoint=_limited(request_response(_form_guard(pages.logout, 'logout'))), methods=["GET", "POST"]),
        Route("/healthz", endpoint=healthz, methods=["GET"]),
    ]
    # DNS rebinding: the sign-in pages and every endpoint answer the server's own Host names only.
    # Exempt: the liveness probe, and the metadata document the gateway fetches from inside a
    # cluster (http://auth:8081/…; public, no credential, the same for everyone).
    checked = HostCheckMiddleware(Starlette(routes=routes), allowed=settings.host_allowlist(),
                                  exempt=("/healthz", "/.well-known/oauth-authorization-server"))
    return AddressAndLimits(
        checked, trusted=settings.trusted_proxy_networks,
        requests=TokenBuckets(settings.auth_rate_limit_per_minute, settings.auth_rate_limit_burst),
        registrations=TokenBuckets(settings.auth_register_per_hour / 60, settings.auth_register_burst),
    )


# ---- client address and rate limits --------------------------------------------------------------

class AddressAndLimits:
    """ASGI middleware in front of the whole authorization server: sets ``scope["client"]`` to
    the address the request is counted against (kit's trusted-proxy rule), then spends one
    token of that address's bucket (IPv6 per /64) — and one of its registration bucket for
    ``POST /register``. Over the limit: 429 with Retry-After, before any database work."""

    def __init__(self, app: ASGIApp, *, trusted: TrustedProxies, requests: TokenBuckets,
                 registrations: TokenBuckets) -> None:
        self.app = app
        self.trusted = trusted
        self.requests = requests
        self.registrations = registrations

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        forwarded = [v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"x-forwarded-for"]
        address = rules.client_address(self.trusted.client((scope.get("client") or (None, 0))[0], forwarded))
        scope["client"] = (address, 0)
        path = scope.get("path", "")
        if path != "/healthz":
            key, now = address_key(address), time.monotonic()
            wait = self.requests.take(key, now)
            if not wait and path == "/register" and scope.get("method") == "POST":
                wait = self.registrations.take(key, now)
            if wait:
                log.warning("rate limit: %s %s from %s refused for %.0f s", scope.get("method"), _safe(path, 40),
                            address, wait)
                await _too_many(path, wait)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _too_many(path: str, wait: float) -> Response:
    retry = str(max(1, int(wait + 0.999))) if wait != float("inf") else "3600"
    headers = {**NO_STORE, "Retry-After": retry}
    if path in PAGE_PATHS:
        return too_many_requests_page(retry, headers)
    return JSONResponse({"error": "too_many_requests",
                         "error_description": f"too many requests from your address; retry in {retry} s"},
                        status_code=429, headers=headers)


# ---- header-read timeout ------------------------------------------------------------------------

def header_timeout_protocol(seconds: float) -> type[asyncio.Protocol]:
    """The protocol class to pass as ``uvicorn.Config(http=…)``: kit's, with this header-read timeout
    (a connection must deliver each request's headers within it, or it is closed)."""
    return header_deadline_protocol(seconds)
