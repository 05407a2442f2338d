"""The web console ``/console``: see, search, correct and manage one's memories in the browser.

A client of the public REST API only (``/v1``), like the graph page: three static files from
``services/gateway/console/`` (``index.html``, ``console.js``, ``console.css``), no build step, nothing
fetched from elsewhere, and a strict Content-Security-Policy — scripts and styles from this origin
only (no inline script or style), fetch to this origin and the sign-in server (registration, token).
The page signs in with OAuth (authorization code + PKCE as a public client of the auth service) or a
pasted API key; either is kept in the tab's ``sessionStorage`` and sent only as an ``Authorization``
header. The files carry no data and no secret; nobody caches them (``no-store``).

- ``GET /console`` — the page (``/console/`` too: the OAuth redirect comes back to ``/console``).
- ``GET /console/console.js``, ``GET /console/console.css`` — its script and style.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

PAGE_PATH = "/console"
_FILES = resources.files("services.gateway.console")
#: the name served → (the file, its media type)
_ASSETS = {"console.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8"}

#: scripts and styles from this origin only; fetch to this origin and the sign-in server
CONSOLE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
               "connect-src 'self' {issuer}; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_COMMON = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "Cross-Origin-Opener-Policy": "same-origin"}


def _read(name: str) -> str:
    return _FILES.joinpath(name).read_text(encoding="utf-8")


def console_routes(issuer: str) -> list[Route]:
    """The console's routes (GET only; kept out of the OpenAPI document: a page, not API);
    ``issuer`` is the OAuth sign-in server the page may call (registration, token)."""
    headers = {**_COMMON, "Content-Security-Policy": CONSOLE_CSP.format(issuer=issuer.rstrip("/"))}
    page_html = _read("index.html")
    assets = {name: (_read(name), media) for name, media in _ASSETS.items()}

    async def page(_: Request) -> Response:
        return Response(page_html, media_type="text/html; charset=utf-8", headers=headers)

    def asset(name: str) -> Any:
        body, media = assets[name]

        async def serve(_: Request) -> Response:
            return Response(body, media_type=media, headers=headers)

        return serve

    return [Route(PAGE_PATH, page, methods=["GET"]), Route(PAGE_PATH + "/", page, methods=["GET"]),
            *(Route(f"{PAGE_PATH}/{name}", asset(name), methods=["GET"]) for name in _ASSETS)]
