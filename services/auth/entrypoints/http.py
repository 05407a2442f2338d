"""The auth service's HTTP face: an OAuth 2.1 authorization server built from the `mcp` SDK's
handlers (RFC 8414 metadata, authorize, token, RFC 7591 registration, RFC 7009 revocation) around
our Postgres-backed provider, plus the sign-in, consent and sign-up pages.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.handlers.register import RegistrationHandler
from mcp.server.auth.handlers.revoke import RevocationHandler
from mcp.server.auth.handlers.token import TokenErrorResponse, TokenHandler
from mcp.server.auth.json_response import PydanticJSONResponse
from mcp.server.auth.routes import build_metadata, cors_middleware
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, RequestBodyLimitMiddleware
from pydantic import AnyHttpUrl, ConfigDict, TypeAdapter
from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, request_response
from starlette.types import ASGIApp

from contracts.auth import DEFAULT_OAUTH_SCOPES
from services.auth.domain import oauth as rules
from services.auth.oauth.pages import Pages
from services.auth.oauth.provider import EngramOAuthProvider, HashedSecretAuthenticator

log = logging.getLogger("engram.auth.http")
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_URL = TypeAdapter(AnyHttpUrl, config=ConfigDict(url_preserve_empty_path=True))
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")


def _safe(value: object, limit: int = 120) -> str:
    """Client input fit for a log line: printable ASCII only (no forged lines), bounded."""
    return _UNPRINTABLE.sub("?", str(value))[:limit]


def issuer_url(issuer: str) -> AnyHttpUrl:
    """The issuer exactly as configured (no trailing slash added): clients compare it as a string."""
    return _URL.validate_python(issuer.rstrip("/"))


def _cors(app: ASGIApp, methods: list[str]) -> ASGIApp:
    return CORSMiddleware(app=app, allow_origins="*", allow_methods=methods, allow_headers=["mcp-protocol-version"])


def _limited(app: ASGIApp) -> ASGIApp:
    return RequestBodyLimitMiddleware(app, DEFAULT_MAX_REQUEST_BODY_SIZE)


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
        response = await handler.handle(request)
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


def oauth_routes(provider: EngramOAuthProvider, issuer: str) -> list[Route]:
    """The SDK's authorization-server routes (as ``mcp.server.auth.routes.create_auth_routes``
    builds them) with two changes: client secrets are checked against stored hashes, and the
    metadata advertises the RFC 9207 ``iss`` parameter our consent page sends."""
    registration = ClientRegistrationOptions(
        enabled=True, valid_scopes=rules.VALID_OAUTH_SCOPES, default_scopes=[s.value for s in DEFAULT_OAUTH_SCOPES]
    )
    revocation = RevocationOptions(enabled=True)
    metadata = build_metadata(issuer_url(issuer), None, registration, revocation)
    metadata.authorization_response_iss_parameter_supported = True
    authenticator = HashedSecretAuthenticator(provider)
    token = TokenHandler(provider, authenticator)
    return [
        Route("/.well-known/oauth-authorization-server",
              endpoint=cors_middleware(MetadataHandler(metadata).handle, ["GET", "OPTIONS"]), methods=["GET", "OPTIONS"]),
        Route("/authorize", endpoint=_limited(request_response(AuthorizationHandler(provider).handle)),
              methods=["GET", "POST"]),
        Route("/token", endpoint=_cors(_limited(request_response(_form_guard(_token_endpoint(token), "token"))),
                                       ["POST", "OPTIONS"]), methods=["POST", "OPTIONS"]),
        Route("/register", endpoint=_cors(_limited(request_response(RegistrationHandler(provider, registration).handle)),
                                          ["POST", "OPTIONS"]), methods=["POST", "OPTIONS"]),
        Route("/revoke", endpoint=_cors(_limited(request_response(
            _form_guard(RevocationHandler(provider, authenticator).handle, "revocation"))), ["POST", "OPTIONS"]),
            methods=["POST", "OPTIONS"]),
    ]


def create_app(provider: EngramOAuthProvider, pages: Pages, issuer: str) -> Starlette:
    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    routes = oauth_routes(provider, issuer) + [
        Route("/login", endpoint=_limited(request_response(_form_guard(pages.login, 'login'))), methods=["GET", "POST"]),
        Route("/consent", endpoint=_limited(request_response(_form_guard(pages.consent, 'consent'))), methods=["GET", "POST"]),
        Route("/signup", endpoint=_limited(request_response(_form_guard(pages.signup, 'signup'))), methods=["GET", "POST"]),
        Route("/healthz", endpoint=healthz, methods=["GET"]),
    ]
    return Starlette(routes=routes)
