"""The web page ``/graph``: the memory-graph app inside a small built-in MCP Apps host.

- ``GET /graph`` — the host page (``graph_app/host.html``). It frames the app in a sandboxed iframe
  (``sandbox="allow-scripts"``: an opaque origin that can reach nothing but its host), answers the
  app's bridge (``ui/initialize``, ``tools/call``, ``ui/request-display-mode``), and forwards the
  app's tool calls to this gateway's MCP endpoint as JSON-RPC over ``fetch`` — the same tools an
  MCP Apps host calls (``memory-graph``, ``fetch-graph-data``, ``get_memory_history``, ``recall``),
  under the same access rules. A request that carries a valid key as ``Authorization: Bearer``
  (scripts, tests, a proxy that signs in for the user) gets the page signed in; a browser without
  one signs in with OAuth (authorization code + PKCE as a public client of the auth service, a
  ``memory:read`` token) or pastes an API key; either is kept in the tab's ``sessionStorage`` and
  sent only as a header. A project filter reloads the graph for one project.
- ``GET /graph/app.html`` — the app itself (the same HTML as the MCP resource), with the
  restrictive Content-Security-Policy the MCP Apps spec gives hosts as the default.

Neither page carries data or secrets: both are static and cacheable by nobody (``no-store``).
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from services.gateway.entrypoints.graph_tools import app_html

PAGE_PATH = "/graph"
APP_PATH = "/graph/app.html"
_HOST_HTML = resources.files("services.gateway.graph_app").joinpath("host.html").read_text(encoding="utf-8")

#: the host page: its own inline script and style, fetch to this origin (and the sign-in server's token
#: and registration endpoints), the app framed from here
HOST_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
            "connect-src 'self' {issuer}; frame-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
#: the app: the MCP Apps spec's restrictive default (no network at all), framed only by this origin
APP_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
           "media-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'")
_COMMON = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


def signed_in(request: Request) -> bool:
    """The request carried a valid credential (the authentication middleware verified it)."""
    return isinstance(request.scope.get("user"), AuthenticatedUser)


def graph_page(issuer: str) -> Any:
    """The memory graph in the browser: the host page, signed in when the request carries a valid key;
    ``issuer`` is the OAuth sign-in server the page may call (registration, token)."""
    csp = HOST_CSP.format(issuer=issuer.rstrip("/"))

    async def page(request: Request) -> Response:
        html = _HOST_HTML.replace("{{SIGNED_IN}}", "1" if signed_in(request) else "0")
        return HTMLResponse(html, headers={**_COMMON, "Content-Security-Policy": csp})

    return page


async def graph_app_page(_: Request) -> Response:
    """The app the host page frames (the MCP resource ui://engram/memory-graph.html)."""
    return HTMLResponse(app_html(), headers={**_COMMON, "Content-Security-Policy": APP_CSP})


def graph_routes(issuer: str) -> list[Route]:
    """The web page's routes (GET only; kept out of the OpenAPI document: they are pages, not API)."""
    return [Route(PAGE_PATH, graph_page(issuer), methods=["GET"]), Route(APP_PATH, graph_app_page, methods=["GET"])]
