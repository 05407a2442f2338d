"""Composition root of the gateway: one FastAPI app serving MCP at /mcp, REST at /v1, health and
the OAuth protected-resource metadata."""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any
from urllib.parse import urlparse

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.routes import build_resource_metadata_url
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contracts.auth import DEFAULT_OAUTH_SCOPES, OAUTH_SCOPES
from contracts.errors import ErrorBody, ErrorCode
from contracts.subjects import AUTH, GRAPH, MEMORY
from kit import listen, metrics, tracing
from kit.bus import Bus
from kit.client import Client
from kit.config import setup_logging
from kit.edge import HostCheckMiddleware
from kit.stalls import freeze_startup_heap, watch_stalls
from services.gateway import toolsets
from services.gateway.adapters.token_verifier import (
    IntrospectionVerifier,
    StrictBearerBackend,
    bearer_credential,
)
from services.gateway.config import GatewaySettings
from services.gateway.entrypoints.console_page import console_routes
from services.gateway.entrypoints.docs_page import docs_routes
from services.gateway.entrypoints.graph_page import graph_routes
from services.gateway.entrypoints.graph_tools import graph_app
from services.gateway.entrypoints.mcp_extras import may_notify
from services.gateway.entrypoints.mcp_tools import build_mcp
from services.gateway.entrypoints.rest import ApiError, build_router, error_response
from services.gateway.operations import Operations
from services.gateway.pin import PinMiddleware, pinned_project
from services.gateway.principal import (
    AccessDenied,
    ClientInfo,
    Principal,
    bearer_challenge,
    client_from_message,
    client_from_session_id,
    session_client,
    session_id_for,
)
from services.gateway.ratelimit import (
    ClientAddressMiddleware,
    PreAuthLimitMiddleware,
    RateLimitMiddleware,
    RateLimits,
    TrustedProxies,
    header_deadline_protocol,
)

log = logging.getLogger("engram.gateway")


class LazyVerifier:
    """The verifier exists before the bus connects (routes are built first); it answers once connected."""

    def __init__(self) -> None:
        self.inner: IntrospectionVerifier | None = None

    async def verify_token(self, token: str) -> Any:
        return await self.inner.verify_token(token) if self.inner else None

    def known_valid(self, scope: Scope) -> bool:
        """The request's bearer token is cached as valid (no auth lookup needed)."""
        if self.inner is None:
            return False
        values = [v.decode("latin-1") for k, v in scope.get("headers") or [] if k == b"authorization"]
        token = bearer_credential(values)
        return token is not None and self.inner.known_valid(token)


class LazyClient(Client):
    """The bus client exists before the bus connects (routes are built first); it is bound once connected."""

    def __init__(self) -> None:
        pass

    def bind(self, bus: Bus, command_timeout_s: float) -> None:
        super().__init__(bus, command_timeout_s=command_timeout_s)



def mcp_refusal(status: int, reason: str, body: ErrorBody, headers: dict[str, str] | None = None) -> JSONResponse:
    """A refusal at the MCP endpoint in MCP's own terms: a JSON-RPC error whose message says why
    (the `mcp` SDK client raises it as the exception's text), the REST-shaped body in its data."""
    return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {
        "code": -32000, "message": f"{reason}: {body.message}",
        "data": {"error": body.model_dump(mode="json")}}}, status_code=status, headers=headers)

def create_app(settings: GatewaySettings) -> FastAPI:
    """The gateway, assembled from its named parts: the MCP servers (one per pin × toolsets) behind
    one endpoint, the REST API, the pages, the discovery documents, the probes, the error handlers
    and the middleware stack. The bus connects in the lifespan; the verifier and the client exist
    before it (routes are built first) and are bound then."""
    verifier, client = LazyVerifier(), LazyClient()
    ops = Operations(client)
    mcp = McpServers(ops, verifier, settings)
    state: dict[str, Any] = {}
    app = FastAPI(
        max_body_size=settings.max_body_bytes,
        title="Engram",
        version="0.1.0",
        description="Long-term memory for AI assistants. MCP at /mcp; the same operations as REST under /v1.",
        lifespan=gateway_lifespan(settings, verifier, client, mcp, state),
        docs_url=None,  # /docs is served from the package, not a CDN (entrypoints/docs_page.py)
        redoc_url=None,
    )
    challenges = Challenges(settings)
    endpoint = McpEndpoint(mcp, settings, challenges.unauthorized)
    # /mcp first: Starlette tries routes in order and every MCP call would otherwise be matched
    # against each REST route before it (~0.17 ms of a call; docs/benchmarks-log.md)
    app.router.routes.append(Route("/mcp", endpoint=endpoint))  # every method: the endpoint answers 405
    app.router.routes.extend(docs_routes(app.openapi_url or "/openapi.json", app.title))
    app.include_router(build_router(ops, challenges.unauthorized))
    app.router.routes.extend(graph_routes(settings.issuer))  # the web page /graph (entrypoints/graph_page.py)
    app.router.routes.extend(console_routes(settings.issuer))  # the web console /console (entrypoints/console_page.py)
    app.router.routes.append(Route("/", endpoint=RootEndpoint(about(app, settings, challenges.metadata_url), endpoint)))
    app.router.routes.extend(mcp.sdk_routes(challenges.metadata_url))
    add_discovery_routes(app, settings, challenges.metadata_url)
    add_probe_routes(app, state)
    add_error_handlers(app)
    add_middleware(app, settings, verifier, mcp)
    return app


class McpServers:
    """The MCP servers of one gateway: one per (pinned or not, toolsets), each an SDK app whose
    ``/mcp`` endpoint :class:`McpEndpoint` picks per request."""

    def __init__(self, ops: Operations, verifier: LazyVerifier, settings: GatewaySettings) -> None:
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=settings.host_allowlist(),
            allowed_origins=[f"{scheme}://{h}" for h in settings.host_allowlist() for scheme in ("http", "https")],
        )
        self.servers = {(pinned, sets): build_mcp(ops, verifier, settings, pinned=pinned, toolsets=sets,
                                                  extensions=graph_app(ops, pinned=pinned, toolsets=sets))
                        for pinned in (False, True) for sets in toolsets.COMBINATIONS}
        self.apps = {
            key: server.streamable_http_app(
                streamable_http_path="/mcp", stateless_http=True, json_response=True, transport_security=security,
                max_request_body_size=settings.max_body_bytes,
            )
            for key, server in self.servers.items()
        }
        self.endpoints = {key: next(r for r in app.routes if getattr(r, "path", None) == "/mcp").app
                          for key, app in self.apps.items()}
        # the same servers answering with a stream (text/event-stream), for a request whose answer may
        # carry notifications (progress, log messages: mcp_extras.may_notify); the others get plain JSON
        self.streaming_managers = {key: StreamableHTTPSessionManager(
            app=server._lowlevel_server, json_response=False, stateless=True, security_settings=security,
            max_request_body_size=settings.max_body_bytes) for key, server in self.servers.items()}
        self.streaming_endpoints = {}
        for key, endpoint in self.endpoints.items():
            streaming = copy.copy(endpoint)  # the SDK's auth guard, around the streaming app
            streaming.app = StreamableHTTPASGIApp(self.streaming_managers[key])
            self.streaming_endpoints[key] = streaming

    def endpoint(self, pinned: bool, sets: frozenset[str], *, streaming: bool = False) -> ASGIApp:
        return (self.streaming_endpoints if streaming else self.endpoints)[(pinned, sets)]  # type: ignore[no-any-return]

    def session_managers(self) -> list[StreamableHTTPSessionManager]:
        """Every session manager, each to be run for the gateway's lifetime."""
        return [server.session_manager for server in self.servers.values()] + list(self.streaming_managers.values())

    def sdk_routes(self, metadata_url: str) -> list[Any]:
        """The SDK app's other routes (its OAuth pieces), but ``/mcp`` and the protected-resource
        metadata, which the gateway serves itself."""
        prm_path = urlparse(metadata_url).path
        return [r for r in self.apps[(False, toolsets.DEFAULT)].routes
                if getattr(r, "path", None) not in ("/mcp", prm_path)]

    def tool_names(self) -> frozenset[str]:
        return frozenset(t.name for server in self.servers.values() for t in server._tool_manager.list_tools())


class Challenges:
    """The OAuth challenge of a refused request (RFC 6750, RFC 9728's metadata URL)."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.metadata_url = str(build_resource_metadata_url(AnyHttpUrl(settings.mcp_url)))
        self.default_scope = " ".join(s.value for s in DEFAULT_OAUTH_SCOPES)

    def challenge(self, headers: Any) -> str:
        """No credentials: no error code (RFC 6750 §3.1); a bad, expired or foreign token: invalid_token."""
        if headers.get("authorization") is None:
            return bearer_challenge(self.metadata_url, self.default_scope)
        return bearer_challenge(self.metadata_url, self.default_scope, "invalid_token", "the access token is invalid, "
                                "expired, revoked or issued for another resource")

    def unauthorized(self, request: Request | None = None) -> ApiError:
        return ApiError(
            401,
            ErrorBody(code=ErrorCode.UNAUTHENTICATED,
                      message="a valid bearer token (API key or OAuth access token) is required"),
            {"WWW-Authenticate": self.challenge(request.headers if request is not None else {"authorization": ""})},
        )


class McpEndpoint:
    """One /mcp URL: a pinned connection gets the tools without `containerTag`. Stateless: POST
    only. No GET SSE stream (the spec's answer for a server that offers none is 405) and no
    sessions to DELETE.

    Who is calling (issue 18 item 3): the answer to ``initialize`` carries an ``Mcp-Session-Id``
    holding the client's ``clientInfo`` (``principal.session_id_for``); the client sends it back
    on every later request, and the tools read it from ``session_client``. No process memory: any
    replica reads any session."""

    def __init__(self, mcp: McpServers, settings: GatewaySettings, unauthorized: Any) -> None:
        self.mcp = mcp
        self.max_body_bytes = settings.max_body_bytes
        self.local_install = is_loopback(settings.base_url)
        self.unauthorized = unauthorized

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await JSONResponse(
                {"jsonrpc": "2.0", "id": None, "error": {
                    "code": -32000, "message": "Method Not Allowed: this stateless MCP server answers POST only "
                    "(no SSE stream on GET, no sessions to DELETE)"}},
                status_code=405, headers={"Allow": "POST"},
            )(scope, receive, send)
            return
        if not isinstance(scope.get("user"), AuthenticatedUser):
            refused = self.unauthorized(Request(scope))
            await mcp_refusal(401, "Unauthorized", refused.body, refused.headers)(scope, receive, send)
            return
        request = Request(scope)
        try:
            sets = toolsets.requested(request.headers.get(toolsets.HEADER),
                                      request.query_params.get(toolsets.QUERY_PARAMETER))
            toolsets.require(Principal.from_token(scope["user"].access_token), sets)
        except toolsets.UnknownToolset as exc:
            body = ErrorBody(code=ErrorCode.INVALID_ARGUMENT, message=str(exc), field="X-Engram-Toolsets")
            await mcp_refusal(400, "Bad Request", body)(scope, receive, send)
            return
        except AccessDenied as exc:
            body = ErrorBody(code=ErrorCode.PERMISSION_DENIED, field="X-Engram-Toolsets",
                             message=f"the maintenance toolset needs the '{exc.scope}' scope: {exc}")
            challenge = f'Bearer error="insufficient_scope", scope="{exc.scope}"'
            await mcp_refusal(403, "Forbidden", body, {"WWW-Authenticate": challenge})(scope, receive, send)
            return
        if not self.local_install:  # a browser client on any origin (CORS is open): the bearer token is the credential
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k != b"origin"]}
        body, receive = await _read_body(receive, self.max_body_bytes)
        named, initialize = client_from_message(body) if body is not None else (None, False)
        token = session_client.set(named or client_from_session_id(request.headers.get("mcp-session-id")))
        try:
            if initialize and named is not None:
                send = _with_session_id(send, named)
            streaming = may_notify(body, request.headers)
            await self.mcp.endpoint(pinned_project.get() is not None, sets, streaming=streaming)(scope, receive, send)
        finally:
            session_client.reset(token)


def about(app: FastAPI, settings: GatewaySettings, metadata_url: str) -> dict[str, str]:
    """What ``GET /`` says of this server."""
    return {"name": "Engram", "version": app.version, "description": "Long-term memory for AI assistants (MCP)",
            "mcp": settings.mcp_url, "rest": settings.base_url + "/v1", "openapi": settings.base_url + "/openapi.json",
            "docs": settings.base_url + "/docs", "health": settings.base_url + "/health",
            "console": settings.base_url + "/console", "graph": settings.base_url + "/graph",
            "oauth_protected_resource": metadata_url}


class RootEndpoint:
    """``GET /``: a short self-description (the Supermemory design's); ``POST /``: the MCP endpoint
    (the AI-memory design's clients post to the root)."""

    def __init__(self, description: dict[str, str], mcp_endpoint: McpEndpoint) -> None:
        self.description = description
        self.mcp_endpoint = mcp_endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] in ("GET", "HEAD"):
            await JSONResponse(self.description)(scope, receive, send)
        else:
            await self.mcp_endpoint(scope, receive, send)


def gateway_lifespan(settings: GatewaySettings, verifier: LazyVerifier, client: LazyClient, mcp: McpServers,
                     state: dict[str, Any]) -> Any:
    """Connect the bus, bind the verifier and the client to it, run the MCP servers' session
    managers and the stall watch; close everything on the way out."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        bus = await Bus.connect(settings.nats_url, settings.names, name="engram-gateway")
        await bus.ensure_streams(settings.stream_replicas)
        inner = IntrospectionVerifier(bus, ttl_s=settings.token_cache_ttl_s, resource=settings.mcp_url)
        await inner.start()
        verifier.inner = inner
        client.bind(bus, settings.command_timeout_s)
        state["bus"] = bus
        stop = asyncio.Event()
        stalls = asyncio.create_task(watch_stalls(stop, threshold_ms=settings.stall_warning_ms))
        freeze_startup_heap()
        try:
            async with AsyncExitStack() as running:
                for manager in mcp.session_managers():
                    await running.enter_async_context(manager.run())
                log.info("gateway ready: MCP at %s", settings.mcp_url)
                yield
        finally:
            stop.set()
            await stalls
            await bus.close()

    return lifespan


def add_discovery_routes(app: FastAPI, settings: GatewaySettings, metadata_url: str) -> None:
    """The OAuth discovery documents: RFC 9728 (ours) and the auth service's RFC 8414 (re-served)."""
    resource_metadata = {
        "resource": settings.mcp_url,
        "authorization_servers": [settings.issuer],
        "scopes_supported": [s.value for s in OAUTH_SCOPES],
        "bearer_methods_supported": ["header"],
        "resource_name": "Engram memory (MCP)",
    }
    metadata_headers = {"Cache-Control": "public, max-age=3600", "Access-Control-Allow-Origin": "*"}
    prm_path = urlparse(metadata_url).path  # /.well-known/oauth-protected-resource/mcp: ours, not the SDK's

    @app.get(prm_path, tags=["oauth"], include_in_schema=False)
    @app.get("/.well-known/oauth-protected-resource", tags=["oauth"], include_in_schema=False)
    async def protected_resource() -> JSONResponse:
        """RFC 9728 metadata, at the MCP path and at the root (for clients that look there first)."""
        return JSONResponse(resource_metadata, headers=metadata_headers)

    as_metadata: dict[str, Any] = {}

    @app.get("/.well-known/oauth-authorization-server", tags=["oauth"], include_in_schema=False)
    async def authorization_server() -> JSONResponse:
        """The auth service's RFC 8414 metadata, fetched once and re-served for clients that look here."""
        if not as_metadata or as_metadata["until"] < time.monotonic():
            try:
                async with httpx.AsyncClient(timeout=5.0) as http:
                    r = await http.get(settings.authorization_server_metadata_url)
                    r.raise_for_status()
                    as_metadata.update(doc=r.json(), until=time.monotonic() + 3600)
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("authorization server metadata unavailable: %s", exc)
                return JSONResponse({"error": "temporarily_unavailable",
                                     "error_description": f"see {settings.issuer}/.well-known/oauth-authorization-server"},
                                    status_code=503)
        return JSONResponse(as_metadata["doc"], headers=metadata_headers)


def add_probe_routes(app: FastAPI, state: dict[str, Any]) -> None:
    """Metrics, liveness and readiness."""

    @app.get("/metrics", tags=["ops"], include_in_schema=False)
    async def prometheus_metrics() -> Response:
        """Prometheus metrics of this gateway replica (kit/metrics.py; docs/observability.md)."""
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)

    @app.get("/healthz", tags=["ops"])
    @app.get("/health", tags=["ops"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers (``/health`` for the AI-memory design's clients; readiness is ``/readyz``)."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"])
    async def readyz() -> JSONResponse:
        """Ready when connected to NATS (503 otherwise). ``services`` says which services answer on
        the bus: while one is down the gateway still serves — its writes are queued (202), its
        reads answer 503 with Retry-After — so it stays ready ("degraded") rather than leaving
        the load balancer."""
        bus = state.get("bus")
        connected = bool(bus and bus.nc.is_connected)
        if not connected:
            return JSONResponse({"status": "not ready", "nats": False, "services": {}}, status_code=503)
        alive = await asyncio.gather(*(bus.service_alive(name, timeout=0.5) for name in (AUTH, MEMORY, GRAPH)))
        services = {name: "up" if up else "down" for name, up in zip((AUTH, MEMORY, GRAPH), alive, strict=True)}
        status = "ready" if all(alive) else "degraded"
        return JSONResponse({"status": status, "nats": True, "services": services})


def readable_errors(errors: Sequence[Any]) -> list[dict[str, Any]]:
    """Validation errors as a person reads them: an optional field's "or none" alternative left out
    when it was given (it says nothing but that the field may be omitted), and pydantic's names for
    a union's members (``constrained-str``, ``function-after[…]``) left out of each location."""
    given = [e for e in errors if e.get("type") != "none_required"] or list(errors)
    return [{**e, "loc": tuple(p for p in e["loc"] if not (isinstance(p, str) and (p == "constrained-str" or "[" in p)))}
            for e in given]


def add_error_handlers(app: FastAPI) -> None:
    """Every refusal has the documented error body (``{"error": {code, message, field}}``)."""

    @app.exception_handler(ApiError)
    async def on_api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = readable_errors(exc.errors())
        first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request", "type": ""}
        invalid_json = first.get("type") == "json_invalid"  # its loc is the byte offset, not a field
        loc = [str(p) for p in first["loc"] if p not in ("body", "query", "header")]
        field = "body" if invalid_json else ".".join(loc) or "body"
        status = 400 if invalid_json else 422
        message = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors[:5])
        return error_response(ApiError(status, ErrorBody(code=ErrorCode.INVALID_ARGUMENT, message=message, field=field)))


def add_middleware(app: FastAPI, settings: GatewaySettings, verifier: LazyVerifier, mcp: McpServers) -> None:
    """The stack, innermost first: the pin, the per-credential limit, the credential, the
    per-address limit, the client's address, the Host check, the metrics, CORS (outermost)."""
    limits = RateLimits(settings.rate_limit_per_minute, settings.rate_limit_burst,
                        settings.anonymous_rate_limit_per_minute, settings.rate_limit_bytes_per_token)
    app.add_middleware(PinMiddleware)
    app.add_middleware(RateLimitMiddleware, limits=limits)  # per credential, weighted by body size
    app.add_middleware(AuthContextMiddleware)
    app.add_middleware(AuthenticationMiddleware, backend=StrictBearerBackend(verifier))
    app.add_middleware(PreAuthLimitMiddleware, limits=limits, known_valid=verifier.known_valid)  # per address
    app.add_middleware(ClientAddressMiddleware, trusted=TrustedProxies(settings.trusted_proxies))
    # DNS rebinding: every route answers its own Host names only (the SDK checked /mcp alone); the
    # probes an orchestrator sends to the pod's address pass
    app.add_middleware(HostCheckMiddleware, allowed=settings.host_allowlist(), exempt=PROBE_PATHS)
    app.add_middleware(metrics.HttpMetricsMiddleware, tools=mcp.tool_names(),  # outermost: 401/413/429 counted too
                       routes=lambda: app.router.routes)
    app.add_middleware(EdgeCors, local_install=is_loopback(settings.base_url))  # outermost: a preflight needs no credential


#: liveness and readiness: answered whatever the Host (a kubelet sends the pod's IP); they tell nothing
PROBE_PATHS = frozenset({"/health", "/healthz", "/readyz"})


def is_loopback(url: str) -> bool:
    """Whether the gateway's public URL is on this machine only (a local install)."""
    return (urlparse(url).hostname or "") in ("127.0.0.1", "localhost", "::1")


#: what a browser's JavaScript may read of an MCP answer: the session, and the OAuth challenge
EXPOSED_HEADERS = ["Mcp-Session-Id", "WWW-Authenticate", "Retry-After"]
CORS_REQUEST_HEADERS = ["Authorization", "Content-Type", "Accept", "Mcp-Session-Id", "Mcp-Protocol-Version",
                        "Last-Event-ID", "X-Engram-Project", "X-Sm-Project", "X-Engram-Toolsets"]
LOOPBACK_ORIGINS = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:[0-9]+)?"


class EdgeCors:
    """CORS (Starlette's middleware) on what a browser MCP client meets: ``/mcp``, ``/`` and the discovery
    documents; the REST API under ``/v1`` is left as it was. Any origin may read the discovery documents.
    For ``/mcp`` (and ``POST /``), a public install accepts any origin — the bearer token is the only
    credential, never a cookie — while a local install (public URL on loopback) keeps answering only
    pages served from this machine, as the SDK's Origin check did. The Host check, the protection
    against DNS rebinding, runs on every install."""

    def __init__(self, app: ASGIApp, *, local_install: bool) -> None:
        self.app = app
        common: dict[str, Any] = {"allow_methods": ["GET", "POST", "DELETE", "OPTIONS"],
                                  "allow_headers": CORS_REQUEST_HEADERS, "expose_headers": EXPOSED_HEADERS,
                                  "max_age": 600}
        self.public = CORSMiddleware(app, allow_origins=["*"], **common)
        self.mcp = (CORSMiddleware(app, allow_origin_regex=LOOPBACK_ORIGINS, **common) if local_install
                    else self.public)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path == "/mcp" or (path == "/" and scope["method"] not in ("GET", "HEAD")):
            await self.mcp(scope, receive, send)
        elif path in ("/", "/health", "/healthz") or path.startswith("/.well-known/"):
            await self.public(scope, receive, send)
        else:
            await self.app(scope, receive, send)


async def _read_body(receive: Receive, limit: int) -> tuple[bytes | None, Receive]:
    """The request body (None past ``limit``: the SDK answers 413) and a ``receive`` that hands it on
    to the SDK unchanged (the SDK reads and parses whole bodies too)."""
    chunks: list[Message] = []
    size = 0
    while True:
        message = await receive()
        chunks.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if size > limit or not message.get("more_body", False):
            break
    complete = chunks[-1]["type"] == "http.request" and not chunks[-1].get("more_body", False) and size <= limit

    async def replay() -> Message:
        return chunks.pop(0) if chunks else await receive()

    body = b"".join(m.get("body", b"") for m in chunks if m["type"] == "http.request") if complete else None
    return body, replay


def _with_session_id(send: Send, client: ClientInfo) -> Send:
    """``send`` with an ``Mcp-Session-Id`` carrying ``client`` on a successful answer to ``initialize``."""

    async def stamped(message: Message) -> None:
        if message["type"] == "http.response.start" and message.get("status") == 200:
            message = {**message, "headers": [*message.get("headers", []),
                                              (b"mcp-session-id", session_id_for(client).encode())]}
        await send(message)

    return stamped


def main() -> None:
    settings = GatewaySettings()
    settings.check_production()  # ENGRAM_ENV=production refuses unsafe settings (kit/config.py)
    setup_logging(settings.log_level)
    tracing.setup("gateway")
    metrics.serve("gateway", settings.gateway_metrics_port, settings.metrics_host)  # a /metrics port of its own too
    config = uvicorn.Config(  # forwarded headers: ClientAddressMiddleware, from ENGRAM_TRUSTED_PROXIES only
        create_app(settings), host=settings.gateway_host, port=settings.gateway_port,
        log_level=settings.log_level.lower(), proxy_headers=False,
        timeout_keep_alive=settings.keep_alive_timeout_s,
        http=header_deadline_protocol(settings.header_timeout_s, settings.body_idle_timeout_s),
    )
    # replicas on one machine share the port (ENGRAM_REUSE_PORT=1, `engram up --replicas N`)
    sockets = [listen.bind(settings.gateway_host, settings.gateway_port)] if listen.reuse_port_requested() else None
    server = uvicorn.Server(config)
    server.run(sockets=sockets)
    if not server.started:
        raise SystemExit(3)
