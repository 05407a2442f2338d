"""Issue 21, the authorization server's findings, each reproduced against the real auth HTTP
server: the running stack's (default settings), or — where a finding needs other settings (low
rate limits, a trusted proxy, a short header timeout) — the same app served by uvicorn in this
process over the stack's Postgres and NATS. Requests come from distinct loopback addresses
(127.0.0.x) so the per-address limits of one test never touch another's."""

from __future__ import annotations

import asyncio
import hashlib
import re
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import parse_qs, urlencode, urlsplit

import asyncpg
import httpx
import httpx2
import pytest
import uvicorn
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import OAuthClientMetadata
from pydantic import AnyUrl

from contracts.subjects import Names
from kit.bus import Bus
from kit.pg import create_pool
from services.auth.adapters.oauth_store import OAuthStore
from services.auth.application.events import AuthEvents
from services.auth.application.maintenance import run_purge_loop
from services.auth.config import AuthSettings
from services.auth.entrypoints.http import create_app, header_timeout_protocol
from services.auth.oauth.pages import Pages
from services.auth.oauth.provider import EngramOAuthProvider

pytestmark = pytest.mark.e2e
REDIRECT = "http://127.0.0.1:53682/callback"
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


def from_address(last_octet: int, **kwargs) -> httpx.AsyncClient:  # type: ignore[no-untyped-def]
    """An HTTP client whose connections come from 127.0.0.<last_octet> (all of 127/8 is loopback)."""
    transport = httpx.AsyncHTTPTransport(local_address=f"127.0.0.{last_octet}")
    return httpx.AsyncClient(transport=transport, timeout=30, follow_redirects=False, **kwargs)


def pkce() -> tuple[str, str]:
    import base64
    import secrets

    verifier = secrets.token_urlsafe(48)
    return verifier, base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")


def form_fields(page: str) -> dict[str, str]:
    return dict(re.findall(r'name="(csrf|request)" value="([^"]*)"', page))


def authorize_url(auth_url: str, mcp_url: str, client: dict, challenge: str, **overrides: str) -> str:  # type: ignore[type-arg]
    params = {"response_type": "code", "client_id": client["client_id"], "redirect_uri": client["redirect_uris"][0],
              "code_challenge": challenge, "code_challenge_method": "S256", "state": "st-" + uuid.uuid4().hex,
              "resource": mcp_url, "scope": "memory:read memory:write", **overrides}
    return auth_url + "/authorize?" + urlencode(params)


async def register(http: httpx.AsyncClient, auth_url: str, redirects: list[str] | None = None, **extra) -> dict:  # type: ignore[no-untyped-def,type-arg]
    r = await http.post(auth_url + "/register", json={"client_name": "hardening test", "redirect_uris": redirects or [REDIRECT], **extra})
    assert r.status_code == 201, r.text
    return r.json()


async def sign_in_and_approve(http: httpx.AsyncClient, auth_url: str, url: str, username: str, password: str) -> str:
    """A browser (``http`` keeps its cookies): authorize → sign in → approve; returns the redirect back."""
    r = await http.get(url)
    for _ in range(12):
        if r.status_code in (302, 303):
            location = r.headers["location"]
            if not location.startswith(auth_url):
                return location
            r = await http.get(location)
            continue
        assert r.status_code == 200, (r.status_code, r.text[:500])
        form = form_fields(r.text)
        if f'action="{auth_url}/login"' in r.text:
            r = await http.post(auth_url + "/login", data={**form, "username": username, "password": password})
        else:
            r = await http.post(auth_url + "/consent", data={**form, "decision": "approve"})
    raise AssertionError("the flow did not finish")


async def tokens(http: httpx.AsyncClient, running, client: dict, username: str | None = None,  # type: ignore[no-untyped-def,type-arg]
                 password: str | None = None) -> dict:  # type: ignore[type-arg]
    verifier, challenge = pkce()
    location = await sign_in_and_approve(http, running.auth_url, authorize_url(running.auth_url, running.mcp_url, client, challenge),
                                         username or running.username, password or running.password)
    code = parse_qs(urlsplit(location).query)["code"][0]
    data = {"grant_type": "authorization_code", "code": code, "redirect_uri": client["redirect_uris"][0],
            "code_verifier": verifier, "client_id": client["client_id"]}
    if client.get("client_secret"):
        data["client_secret"] = client["client_secret"]
    r = await http.post(running.auth_url + "/token", data=data)
    assert r.status_code == 200, r.text
    return r.json()


async def gateway_status(running, token: str) -> int:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(running.mcp_url, json=LIST_TOOLS, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"})
        return r.status_code


# ---- #5 revocation by public clients ---------------------------------------------------------------

class _Storage:
    def __init__(self) -> None:
        self.tokens = None
        self.client_info = None

    async def get_tokens(self):  # type: ignore[no-untyped-def]
        return self.tokens

    async def set_tokens(self, tokens) -> None:  # type: ignore[no-untyped-def]
        self.tokens = tokens

    async def get_client_info(self):  # type: ignore[no-untyped-def]
        return self.client_info

    async def set_client_info(self, info) -> None:  # type: ignore[no-untyped-def]
        self.client_info = info


async def test_a_public_client_revokes_its_tokens_with_its_client_id_alone(running) -> None:  # type: ignore[no-untyped-def]
    """Issue 21 #5: ``POST /revoke token=…&client_id=…`` answered ``400 client_secret: Field
    required`` and the token stayed valid. The client is the `mcp` SDK's, registered as MCP
    clients do (``token_endpoint_auth_method: none``)."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    storage = _Storage()
    location: dict[str, str] = {}
    browser = from_address(11)

    async def redirect_handler(url: str) -> None:
        location["url"] = await sign_in_and_approve(browser, running.auth_url, url, running.username, running.password)

    async def callback_handler():  # type: ignore[no-untyped-def]
        from mcp.shared.auth import AuthorizationCodeResult

        query = parse_qs(urlsplit(location["url"]).query)
        return AuthorizationCodeResult(code=query["code"][0], state=query.get("state", [None])[0],
                                       iss=query.get("iss", [None])[0])

    provider = OAuthClientProvider(
        server_url=running.mcp_url,
        client_metadata=OAuthClientMetadata(client_name="public e2e", redirect_uris=[AnyUrl(REDIRECT)],
                                            token_endpoint_auth_method="none"),
        storage=storage, redirect_handler=redirect_handler, callback_handler=callback_handler,
    )
    async with browser:
        http2 = httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30.0, read=60.0))
        async with http2, Client(streamable_http_client(running.mcp_url, http_client=http2)) as client:
            assert not (await client.call_tool("whoAmI", {})).is_error
    info, issued = storage.client_info, storage.tokens
    assert info is not None and issued is not None
    assert info.client_secret is None and info.token_endpoint_auth_method == "none"  # a public client
    revocation = str(provider.context.oauth_metadata.revocation_endpoint)
    assert "none" in (provider.context.oauth_metadata.revocation_endpoint_auth_methods_supported or [])
    async with from_address(12) as http:
        assert await gateway_status(running, issued.access_token) == 200
        r = await http.post(revocation, data={"token": issued.access_token, "client_id": info.client_id})
        assert r.status_code == 200, r.text
        assert await gateway_status(running, issued.access_token) == 401
        refresh = await http.post(running.auth_url + "/token", data={
            "grant_type": "refresh_token", "refresh_token": issued.refresh_token, "client_id": info.client_id})
        assert refresh.status_code == 400 and refresh.json()["error"] == "invalid_grant"  # the whole grant


async def test_a_confidential_client_still_needs_its_secret_to_revoke(running) -> None:  # type: ignore[no-untyped-def]
    async with from_address(13) as http:
        client = await register(http, running.auth_url)
        issued = await tokens(http, running, client)
        for secret in (None, "wrong secret"):
            data = {"token": issued["access_token"], "client_id": client["client_id"]}
            if secret:
                data["client_secret"] = secret
            r = await http.post(running.auth_url + "/revoke", data=data)
            assert r.status_code == 401 and r.json()["error"] == "invalid_client", r.text
        assert await gateway_status(running, issued["access_token"]) == 200
        # a public client cannot revoke another client's token
        public = await register(http, running.auth_url, token_endpoint_auth_method="none")
        r = await http.post(running.auth_url + "/revoke", data={"token": issued["refresh_token"],
                                                                "client_id": public["client_id"],
                                                                "token_type_hint": "refresh_token"})
        assert r.status_code == 200 and await gateway_status(running, issued["access_token"]) == 200
        ok = await http.post(running.auth_url + "/revoke", data={"token": issued["refresh_token"], "client_id": client["client_id"],
                                                                 "client_secret": client["client_secret"]})
        assert ok.status_code == 200 and await gateway_status(running, issued["access_token"]) == 401


# ---- #12 the token endpoint and RFC 8707 ------------------------------------------------------------

async def test_the_token_endpoint_refuses_another_resource(running) -> None:  # type: ignore[no-untyped-def]
    """Issue 21 #12: a code exchanged with ``resource=https://other.example/mcp`` gave 200 and tokens."""
    async with from_address(14) as http:
        client = await register(http, running.auth_url)
        verifier, challenge = pkce()
        location = await sign_in_and_approve(http, running.auth_url, authorize_url(running.auth_url, running.mcp_url, client, challenge),
                                             running.username, running.password)
        code = parse_qs(urlsplit(location).query)["code"][0]
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT, "code_verifier": verifier,
                "client_id": client["client_id"], "client_secret": client["client_secret"]}
        foreign = await http.post(running.auth_url + "/token", data={**form, "resource": "https://other.example/mcp"})
        assert foreign.status_code == 400 and foreign.json()["error"] == "invalid_target", foreign.text
        good = await http.post(running.auth_url + "/token", data={**form, "resource": running.mcp_url})
        assert good.status_code == 200, good.text  # the refused request did not spend the code
        refresh = {"grant_type": "refresh_token", "refresh_token": good.json()["refresh_token"],
                   "client_id": client["client_id"], "client_secret": client["client_secret"]}
        r = await http.post(running.auth_url + "/token", data={**refresh, "resource": "https://other.example/mcp"})
        assert r.status_code == 400 and r.json()["error"] == "invalid_target"
        assert (await http.post(running.auth_url + "/token", data=refresh)).status_code == 200


# ---- #6 and #11 registration -----------------------------------------------------------------------

async def test_registration_is_bounded_printable_and_never_forges_a_log_line(running) -> None:  # type: ignore[no-untyped-def]
    """Issue 21 #6 (2,000 redirect URIs per client) and #11 (a newline in client_name wrote a
    forged line into auth.log)."""
    async with from_address(15) as http:
        url = running.auth_url + "/register"
        many = [f"http://127.0.0.1:{20000 + i}/cb" for i in range(2000)]
        r = await http.post(url, json={"client_name": "big", "redirect_uris": many})
        assert r.status_code in (400, 413), r.status_code
        if r.status_code == 400:
            assert r.json()["error"] == "invalid_client_metadata" and "redirect_uris" in r.json()["error_description"]
        eleven = await http.post(url, json={"redirect_uris": many[:11]})
        assert eleven.status_code == 400 and eleven.json() == {
            "error": "invalid_client_metadata", "error_description": "redirect_uris: at most 10 redirect URIs may be registered"}
        long_uri = await http.post(url, json={"redirect_uris": ["https://a.example/" + "x" * 3000]})
        assert long_uri.status_code == 400 and "redirect_uris[0]: at most 2000 characters" in long_uri.text
        long_name = await http.post(url, json={"client_name": "n" * 500, "redirect_uris": [REDIRECT]})
        assert long_name.status_code == 400 and "client_name: at most 200 characters" in long_name.text
        marker = uuid.uuid4().hex
        forged = f"x\n2026-01-01 00:00:00,000 INFO engram.auth.pages: user admin signed in {marker}"
        r = await http.post(url, json={"client_name": forged, "redirect_uris": [REDIRECT]})
        assert r.status_code == 400 and r.json()["error"] == "invalid_client_metadata"
        assert "client_name must not contain control characters" in r.json()["error_description"]
        log = running.stack.services["auth"].log_path.read_text(errors="replace")
        assert not any(line.startswith("2026-01-01") and marker in line for line in log.splitlines())
        ten = await http.post(url, json={"client_name": "Zoë’s app", "redirect_uris": many[:10]})
        assert ten.status_code == 201, ten.text


async def test_only_reverse_domain_private_schemes_are_registered(running) -> None:  # type: ignore[no-untyped-def]
    """Issue 21 #7: ``ms-msdt:`` was accepted as a redirect URI."""
    async with from_address(16) as http:
        for uri in ("ms-msdt:/id PCWDiagnostic", "search-ms:query=x", "myapp://callback"):
            r = await http.post(running.auth_url + "/register", json={"redirect_uris": [uri]})
            assert r.status_code == 400 and r.json()["error"] in ("invalid_redirect_uri", "invalid_client_metadata"), uri
        for uri in ("com.example.app:/oauth/callback", "cursor://anysphere.cursor-retrieval/oauth/callback"):
            await register(http, running.auth_url, [uri])


# ---- #7 no open redirect through an attacker-registered client ---------------------------------------

async def test_authorize_errors_for_an_unvetted_client_show_a_page_not_a_redirect(running) -> None:  # type: ignore[no-untyped-def]
    """Issue 21 #7: an attacker registers ``https://evil.example/phish`` and sends people a link
    to /authorize with an error in it; the browser went straight to evil.example."""
    phish = f"https://evil-{uuid.uuid4().hex[:6]}.example/phish"
    async with from_address(17) as http:
        client = await register(http, running.auth_url, [phish])
        _, challenge = pkce()
        for bad in ({"response_type": "token"}, {"scope": "admin"}, {"resource": "https://x.example/mcp"},
                    {"code_challenge": "short"}):
            r = await http.get(authorize_url(running.auth_url, running.mcp_url, client, challenge, **bad))
            assert r.status_code == 400 and "location" not in r.headers, (bad, r.status_code, r.headers.get("location"))
            assert "cannot be completed" in r.text and "evil" not in r.text
        # a loopback redirect URI stays on the user's machine: errors are still redirected there
        local = await register(http, running.auth_url)
        r = await http.get(authorize_url(running.auth_url, running.mcp_url, local, challenge, scope="admin"))
        assert r.status_code == 302 and r.headers["location"].startswith(REDIRECT + "?error=invalid_scope")
        # once the signed-in user has allowed the client, its errors go back to it (RFC 6749 §4.1.2.1)
        back = await sign_in_and_approve(http, running.auth_url, authorize_url(running.auth_url, running.mcp_url, client, challenge),
                                         running.username, running.password)
        assert back.startswith(phish + "?code=")
        # approving issued a code, not yet a grant: still unvetted
        r = await http.get(authorize_url(running.auth_url, running.mcp_url, client, challenge, scope="admin"))
        assert r.status_code == 400 and "location" not in r.headers
        verifier, challenge2 = pkce()
        back = await sign_in_and_approve(http, running.auth_url, authorize_url(running.auth_url, running.mcp_url, client, challenge2),
                                         running.username, running.password)
        code = parse_qs(urlsplit(back).query)["code"][0]
        redeemed = await http.post(running.auth_url + "/token", data={
            "grant_type": "authorization_code", "code": code, "redirect_uri": phish, "code_verifier": verifier,
            "client_id": client["client_id"], "client_secret": client["client_secret"]})
        assert redeemed.status_code == 200, redeemed.text
        r = await http.get(authorize_url(running.auth_url, running.mcp_url, client, challenge, scope="admin"))
        assert r.status_code == 302 and r.headers["location"].startswith(phish + "?error=invalid_scope")
    async with from_address(18) as stranger:  # another browser, not signed in: still a page
        r = await stranger.get(authorize_url(running.auth_url, running.mcp_url, client, challenge, scope="admin"))
        assert r.status_code == 400 and "location" not in r.headers


# ---- #8 sign-in throttling ---------------------------------------------------------------------------

async def _new_user(running) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    name, password = f"erin-{uuid.uuid4().hex[:6]}", "erin's long password"
    await asyncio.to_thread(running.stack.create_user, name, password)
    return name, password


async def _login_page(http: httpx.AsyncClient, running) -> dict[str, str]:  # type: ignore[no-untyped-def]
    page = await http.get(running.auth_url + "/login")
    return form_fields(page.text)


async def test_forwarded_for_from_loopback_no_longer_picks_the_address(running) -> None:  # type: ignore[no-untyped-def]
    """Issue 21 #8: five failures from one X-Forwarded-For address, then the right password from
    another, was accepted. Forwarded headers are believed from ENGRAM_TRUSTED_PROXIES only (none
    by default), so all six come from the socket's address, and the sixth is throttled."""
    name, password = await _new_user(running)
    async with httpx.AsyncClient(timeout=30) as http:  # from 127.0.0.1, which uvicorn trusts for X-Forwarded-For
        form = await _login_page(http, running)
        for i in range(5):
            r = await http.post(running.auth_url + "/login", headers={"X-Forwarded-For": f"198.51.100.{i + 1}"},
                                data={**form, "username": name, "password": "wrong password!"})
            assert r.status_code == 401
        r = await http.post(running.auth_url + "/login", headers={"X-Forwarded-For": "203.0.113.9"},
                            data={**form, "username": name, "password": password})
        assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
        assert "engram_session" not in r.headers.get("set-cookie", "")


async def test_an_account_is_locked_after_failures_from_many_addresses(running) -> None:  # type: ignore[no-untyped-def]
    """Issue 21 #8: the counters were per (username, address) and per address only; a guesser
    with many addresses had unlimited tries. Two failures each from five addresses, then the
    right password from a sixth: refused while the account is locked."""
    name, password = await _new_user(running)
    for octet in range(31, 36):
        async with from_address(octet) as http:
            form = await _login_page(http, running)
            for _ in range(2):
                r = await http.post(running.auth_url + "/login", data={**form, "username": name, "password": "wrong password!"})
                assert r.status_code == 401, (octet, r.status_code)
    async with from_address(36) as http:
        form = await _login_page(http, running)
        r = await http.post(running.auth_url + "/login", data={**form, "username": name, "password": password})
        assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
    async with from_address(37) as http:  # another account from the same addresses is not affected
        other, other_password = await _new_user(running)
        form = await _login_page(http, running)
        r = await http.post(running.auth_url + "/login", data={**form, "username": other, "password": other_password})
        assert r.status_code == 200 and "engram_session" in r.headers.get("set-cookie", "")


# ---- #13 sign-out ------------------------------------------------------------------------------------

async def test_sign_out_ends_the_session_server_side(running) -> None:  # type: ignore[no-untyped-def]
    """Issue 21 #13: the 12-hour sign-in session had no sign-out."""
    async with from_address(19) as http:
        client = await register(http, running.auth_url)
        url = authorize_url(running.auth_url, running.mcp_url, client, pkce()[1])
        r = await http.get(url)
        request_id = parse_qs(urlsplit(r.headers["location"]).query)["request"][0]
        form = await _login_page(http, running)
        r = await http.post(running.auth_url + "/login", data={**form, "request": request_id,
                                                               "username": running.username, "password": running.password})
        assert r.status_code == 303
        session = http.cookies.get("engram_session")
        assert session
        consent = await http.get(f"{running.auth_url}/consent?request={request_id}")
        assert consent.status_code == 200 and f'action="{running.auth_url}/logout"' in consent.text
        forged = await http.post(running.auth_url + "/logout", data={"request": request_id})  # no CSRF value
        assert forged.status_code == 403
        cross_site = await http.post(running.auth_url + "/logout", headers={"Origin": "https://evil.example"},
                                     data=form_fields(consent.text))
        assert cross_site.status_code == 403
        assert (await http.get(f"{running.auth_url}/consent?request={request_id}")).status_code == 200  # still signed in
        out = await http.post(running.auth_url + "/logout", data=form_fields(consent.text))
        assert out.status_code == 303 and out.headers["location"] == f"{running.auth_url}/login?request={request_id}"
        assert 'engram_session=""' in out.headers["set-cookie"] or "max-age=0" in out.headers["set-cookie"].lower()
    async with from_address(19, cookies={"engram_session": session}) as replay:  # the old cookie opens nothing
        r = await replay.get(f"{running.auth_url}/consent?request={request_id}")
        assert r.status_code == 303 and r.headers["location"].startswith(running.auth_url + "/login")


# ---- the same app with other settings, served in this process ---------------------------------------

@dataclass
class Local:
    url: str
    store: OAuthStore
    settings: AuthSettings


@asynccontextmanager
async def local_server(running, **settings: object) -> AsyncIterator[Local]:  # type: ignore[no-untyped-def]
    """The authorization server's app (create_app) on uvicorn with ``settings``, as main.py should
    run it: proxy_headers off (the app decides whom to believe) and the header-read timeout."""
    names = Names(running.stack.o.namespace)
    config_settings = AuthSettings(**settings)  # type: ignore[arg-type]
    bus = await Bus.connect(running.stack.nats_url, names, name="engram-test-auth-http")
    pool = await create_pool(running.stack.database_url)
    store = OAuthStore(pool, "auth")
    server: uvicorn.Server | None = None
    try:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        issuer = f"http://127.0.0.1:{port}"
        provider = EngramOAuthProvider(store, AuthEvents(bus, names), issuer=issuer, resource=running.mcp_url)
        pages = Pages(store, issuer=issuer, allow_signup=False)
        app = create_app(provider, pages, issuer, config_settings)
        server = uvicorn.Server(uvicorn.Config(
            app, log_level="warning", proxy_headers=False, lifespan="off",
            timeout_keep_alive=config_settings.auth_keep_alive_s,
            http=header_timeout_protocol(config_settings.auth_header_timeout_s),
        ))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            assert not task.done(), task.result()
            await asyncio.sleep(0.02)
        yield Local(issuer, store, config_settings)
    finally:
        if server is not None:
            server.should_exit = True
            await task
        await pool.close()
        await bus.close()


async def test_registration_and_every_endpoint_are_rate_limited_per_address(running) -> None:  # type: ignore[no-untyped-def]
    """Issue 21 #6: /register, /authorize and failed sign-ins had no limit (10 anonymous
    registrations grew auth.oauth_clients from 16 kB to 8.6 MB)."""
    async with local_server(running, auth_register_burst=3, auth_register_per_hour=1,
                            auth_rate_limit_burst=20, auth_rate_limit_per_minute=1) as local:
        async with from_address(41) as http:
            for _ in range(3):
                await register(http, local.url)
            r = await http.post(local.url + "/register", json={"redirect_uris": [REDIRECT]})
            assert r.status_code == 429 and r.json()["error"] == "too_many_requests"
            assert int(r.headers["retry-after"]) > 0
        async with from_address(42) as other:  # another address has its own buckets
            client = await register(other, local.url)
            statuses = []
            for _ in range(20):
                r = await other.get(authorize_url(local.url, running.mcp_url, client, pkce()[1]))
                statuses.append(r.status_code)
            assert statuses[-1] == 429 and statuses[0] == 302, statuses
            page = await other.post(local.url + "/login", data={"username": "x", "password": "y"})
            assert page.status_code == 429 and "Too many requests" in page.text  # failed sign-ins too
            assert (await other.get(local.url + "/healthz")).status_code == 200  # never limited


async def test_forwarded_for_is_believed_from_a_configured_proxy_only(running) -> None:  # type: ignore[no-untyped-def]
    """ENGRAM_TRUSTED_PROXIES=127.0.0.43: behind that proxy each client has its own bucket;
    from any other address X-Forwarded-For changes nothing (no rotating out of the limit)."""
    async with local_server(running, trusted_proxies="127.0.0.43", auth_register_burst=1, auth_register_per_hour=1) as local:
        async with from_address(43) as proxy:
            for client_ip in ("198.51.100.1", "198.51.100.2"):
                r = await proxy.post(local.url + "/register", headers={"X-Forwarded-For": f"6.6.6.6, {client_ip}"},
                                     json={"redirect_uris": [REDIRECT]})
                assert r.status_code == 201, r.text
            again = await proxy.post(local.url + "/register", headers={"X-Forwarded-For": "198.51.100.1"},
                                     json={"redirect_uris": [REDIRECT]})
            assert again.status_code == 429
        async with from_address(44) as direct:
            statuses = []
            for i in range(3):
                r = await direct.post(local.url + "/register", headers={"X-Forwarded-For": f"203.0.113.{i}"},
                                      json={"redirect_uris": [REDIRECT]})
                statuses.append(r.status_code)
            assert statuses == [201, 429, 429]


async def test_a_connection_that_drips_its_headers_is_closed(running) -> None:  # type: ignore[no-untyped-def]
    """Issue 21 #13: a connection sending one header line a second stayed open (25 s and more)."""
    async with local_server(running, auth_header_timeout_s=1) as local:
        port = int(local.url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        await writer.drain()
        closed = False
        for i in range(60):  # a minute of dripping, if the server let it
            try:
                writer.write(f"X-Drip-{i}: a\r\n".encode())
                await writer.drain()
                data = await asyncio.wait_for(reader.read(1024), timeout=1)
            except (TimeoutError, ConnectionError):
                continue
            if data == b"" or data.startswith(b"HTTP/1.1 408"):  # closed, or told why and then closed
                closed = True
                break
        writer.close()
        assert closed, "the server kept a connection open that never finished its headers"
        async with httpx.AsyncClient(timeout=10) as http:  # a normal request is unaffected
            assert (await http.get(local.url + "/healthz")).status_code == 200


# ---- #6 purge ----------------------------------------------------------------------------------------

async def test_expired_rows_and_unused_clients_are_purged_on_a_schedule(running) -> None:  # type: ignore[no-untyped-def]
    conn = await asyncpg.connect(running.stack.database_url)
    pool = await create_pool(running.stack.database_url)
    tag = uuid.uuid4().hex[:8]
    stale, fresh, used = (str(uuid.uuid4()) for _ in range(3))
    try:
        for client_id, age in ((stale, "8 days"), (fresh, "1 day"), (used, "30 days")):
            await conn.execute("INSERT INTO auth.oauth_clients (client_id, metadata, created_at) "
                               f"VALUES ($1, '{{}}', now() - interval '{age}')", client_id)
        await conn.execute("""INSERT INTO auth.oauth_grants (id, client_id, user_id, scopes, resource)
                               VALUES ($1, $2, $3, '{memory:read}', 'x')""", uuid.uuid4(), used, running.user_id)
        for request_id, expires in ((f"old-{tag}", "- interval '1 minute'"), (f"live-{tag}", "+ interval '5 minutes'")):
            await conn.execute(f"""INSERT INTO auth.oauth_requests (id, client_id, redirect_uri, redirect_uri_explicit,
                                   scopes, code_challenge, resource, expires_at)
                                   VALUES ($1, $2, 'http://127.0.0.1/cb', true, '{{}}', 'c', 'r', now() {expires})""",
                               request_id, fresh)
        await conn.execute("""INSERT INTO auth.login_failures (key, failures, first_failed_at) VALUES
                              ($1, 3, now() - interval '1 hour'), ($2, 3, now())""", f"acct:old-{tag}", f"acct:new-{tag}")
        await conn.execute("""INSERT INTO auth.sessions (id_hash, user_id, expires_at) VALUES
                              ($1, $2, now() - interval '1 minute')""", f"gone-{tag}", running.user_id)
        stop = asyncio.Event()
        loop = asyncio.create_task(run_purge_loop(OAuthStore(pool, "auth"), stop, 3600.0,
                                                  unused_client_age=timedelta(days=7)))
        for _ in range(200):  # the loop purges once at start
            if not await conn.fetchval("SELECT count(*) FROM auth.oauth_clients WHERE client_id = $1", stale):
                break
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait_for(loop, timeout=30)
        clients = {r["client_id"] for r in await conn.fetch(
            "SELECT client_id FROM auth.oauth_clients WHERE client_id = ANY($1)", [stale, fresh, used])}
        assert clients == {fresh, used}  # never-used and 8 days old: gone; recent or granted: kept
        requests = {r["id"] for r in await conn.fetch("SELECT id FROM auth.oauth_requests WHERE id LIKE $1", f"%-{tag}")}
        assert requests == {f"live-{tag}"}
        failures = {r["key"] for r in await conn.fetch("SELECT key FROM auth.login_failures WHERE key LIKE $1", f"%-{tag}")}
        assert failures == {f"acct:new-{tag}"}
        assert not await conn.fetchval("SELECT count(*) FROM auth.sessions WHERE id_hash = $1", f"gone-{tag}")
    finally:
        await conn.execute("DELETE FROM auth.oauth_clients WHERE client_id = ANY($1)", [stale, fresh, used])
        await conn.close()
        await pool.close()
