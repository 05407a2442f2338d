"""``GET /docs``: the REST API's Swagger UI, served from this installation, never from a CDN.

FastAPI's default page loads swagger-ui's script and stylesheet from a CDN without integrity
checks, on the gateway's own origin - the origin of ``/graph`` and of the OAuth metadata: whoever
could change that file would run script on the gateway's origin. The assets come from the
``swagger-ui-bundle`` package (under ``/docs/assets``), and the page carries a Content-Security-
Policy that runs no script but its own assets and the one inline script the page is made with
(by its hash), loads nothing from elsewhere and cannot be framed. ReDoc (another CDN script) is
not served.
"""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

DOCS_PATH = "/docs"
ASSETS_PATH = DOCS_PATH + "/assets"
OAUTH2_REDIRECT_PATH = DOCS_PATH + "/oauth2-redirect"


def _with_policy(page: HTMLResponse) -> HTMLResponse:
    """``page`` with a Content-Security-Policy allowing its inline scripts by their hashes only."""
    body = bytes(page.body)
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(script).digest()).decode() + "'"
        for script in re.findall(rb"<script>(.*?)</script>", body, re.DOTALL)
    )
    policy = (
        f"default-src 'none'; script-src 'self' {hashes}; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    )
    return HTMLResponse(body, headers={"Content-Security-Policy": policy, "X-Content-Type-Options": "nosniff"})


def docs_routes(openapi_url: str, title: str) -> list[BaseRoute]:
    """The Swagger UI page, its OAuth2 redirect page and its assets (from the package)."""
    page = _with_policy(
        get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{title} - Swagger UI",
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon-32x32.png",
            oauth2_redirect_url=OAUTH2_REDIRECT_PATH,
        )
    )
    redirect = _with_policy(get_swagger_ui_oauth2_redirect_html())

    async def docs(_: Request) -> Response:
        return page

    async def oauth2_redirect(_: Request) -> Response:
        return redirect

    return [
        Route(DOCS_PATH, docs, methods=["GET"], include_in_schema=False),
        Route(OAUTH2_REDIRECT_PATH, oauth2_redirect, methods=["GET"], include_in_schema=False),
        Mount(ASSETS_PATH, app=StaticFiles(directory=swagger_ui_path), name="swagger-ui-assets"),
    ]
