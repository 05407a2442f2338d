"""OAuth 2.1 end to end: the `mcp` SDK's OAuth client against the running stack (gateway as resource
server, auth service as authorization server), and the errors the RFCs prescribe for bad input."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import parse_qs, urlencode, urlsplit

import asyncpg
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl

pytestmark = pytest.mark.e2e
REDIRECT = "http://127.0.0.1:53682/callback"
OTHER_REDIRECT = "http://127.0.0.1:53682/other"
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


def text_of(result) -> str:  # type: ignore[no-untyped-def]
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


class MemoryStorage:
    """The SDK's TokenStorage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class Browser:
    """What a person does in the browser: follow the authorize redirect, sign in, approve."""

    def __init__(self, running, approve: bool = True, username: str | None = None,  # type: ignore[no-untyped-def]
                 password: str | None = None) -> None:
        self.running = running
        self.approve = approve
        self.username = username or running.username
        self.password = password or running.password
        self.visits = 0
        self.location: str | None = None
        self.pages: list[str] = []
        self.last: httpx.Response | None = None

    async def authorize(self, url: str) -> str:
        """Run the browser part of the flow; returns where the browser is sent back (redirect_uri?code=…)."""
        self.visits += 1
        auth = self.running.auth_url
        async with httpx.AsyncClient(follow_redirects=False, timeout=30) as http:
            r = await http.get(url)
            for _ in range(12):
                if r.status_code in (302, 303):
                    location = r.headers["location"]
                    if not location.startswith(auth):
                        return location
                    r = await http.get(location)
                    continue
                self.last = r
                assert r.status_code == 200, (r.status_code, re.sub(r"(?s)<style>.*?</style>", "", r.text)[:800])
                self.pages.append(r.text)
                form = {k: v for k, v in re.findall(r'name="(csrf|request)" value="([^"]*)"', r.text)}
                assert form.get("csrf"), r.text[:800]
                if f'action="{auth}/login"' in r.text:
                    form.update(username=self.username, password=self.password)
                    r = await http.post(auth + "/login", data=form)
                elif f'action="{auth}/consent"' in r.text:
                    form["decision"] = "approve" if self.approve else "deny"
                    r = await http.post(auth + "/consent", data=form)
                else:
                    raise AssertionError(f"unexpected page: {r.text[:800]}")
        raise AssertionError("the authorization flow did not finish")

    async def redirect_handler(self, url: str) -> None:
        self.location = await self.authorize(url)

    async def callback_handler(self) -> AuthorizationCodeResult:
        assert self.location is not None
        query = parse_qs(urlsplit(self.location).query)
        assert "code" in query, self.location
        return AuthorizationCodeResult(code=query["code"][0], state=query.get("state", [None])[0],
                                       iss=query.get("iss", [None])[0])


def sdk_provider(running, storage: MemoryStorage, browser: Browser) -> OAuthClientProvider:  # type: ignore[no-untyped-def]
    return OAuthClientProvider(
        server_url=running.mcp_url,
        client_metadata=OAuthClientMetadata(client_name="Engram e2e", redirect_uris=[AnyUrl(REDIRECT)]),
        storage=storage, redirect_handler=browser.redirect_handler, callback_handler=browser.callback_handler,
    )


@asynccontextmanager
async def oauth_client(url: str, provider: OAuthClientProvider) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30.0, read=60.0))
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


async def test_sdk_client_discovers_registers_signs_in_refreshes_and_is_refused_after_revocation(running) -> None:  # type: ignore[no-untyped-def]
    storage, browser = MemoryStorage(), Browser(running)
    provider = sdk_provider(running, storage, browser)
    async with oauth_client(running.mcp_url, provider) as client:
        who = await client.call_tool("whoAmI", {})
        assert not who.is_error and running.user_id in text_of(who)
        fact = f"My OAuth-saved fact {uuid.uuid4().hex[:6]}"
        assert not (await client.call_tool("memory", {"content": fact, "containerTag": "oauth"})).is_error
        recalled = await client.call_tool("recall", {"query": "OAuth-saved fact", "containerTag": "oauth"})
        assert fact in text_of(recalled)
    # Everything was discovered from the 401: RFC 9728 metadata, then the auth server's RFC 8414 metadata.
    ctx = provider.context
    assert str(ctx.protected_resource_metadata.resource) == running.mcp_url
    assert ctx.auth_server_url == running.auth_url and str(ctx.oauth_metadata.issuer) == running.auth_url
    assert storage.client_info and storage.client_info.client_secret  # RFC 7591 registration
    first = storage.tokens
    assert first and first.access_token.startswith("egat_") and first.refresh_token.startswith("egrt_")
    assert set(first.scope.split()) == {"memory:read", "memory:write"}
    assert "Allow Engram e2e" in browser.pages[-1] and "Save, update and forget memories" in browser.pages[-1]

    # The access token expires: the SDK refreshes (rotation: a new refresh token too), no new sign-in.
    ctx.token_expiry_time = time.time() - 1
    async with oauth_client(running.mcp_url, provider) as client:
        assert running.user_id in text_of(await client.call_tool("whoAmI", {}))
    second = storage.tokens
    assert second.access_token != first.access_token and second.refresh_token != first.refresh_token
    assert browser.visits == 1

    # RFC 7009 revocation: every gateway refuses the token at once (the event clears their caches).
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(str(ctx.oauth_metadata.revocation_endpoint), data={
            "token": second.access_token, "client_id": storage.client_info.client_id,
            "client_secret": storage.client_info.client_secret,
        })
        assert r.status_code == 200
        refused = await http.post(running.mcp_url, json=LIST_TOOLS,
                                  headers={**MCP_HEADERS, "Authorization": f"Bearer {second.access_token}"})
        assert refused.status_code == 401
        assert 'error="invalid_token"' in refused.headers["www-authenticate"]
        again = await token_request(http, running, grant_type="refresh_token", refresh_token=second.refresh_token,
                                    client=storage.client_info.model_dump())
        assert again.status_code == 400 and again.json()["error"] == "invalid_grant"


# ---- helpers for the raw protocol tests --------------------------------------------------------

def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


async def register(http: httpx.AsyncClient, running, redirects: list[str] | None = None, **extra) -> dict:  # type: ignore[no-untyped-def,type-arg]
    body = {"client_name": "raw test client", "redirect_uris": redirects or [REDIRECT], **extra}
    r = await http.post(running.auth_url + "/register", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def authorize_url(running, client: dict, challenge: str, **overrides: str) -> str:  # type: ignore[no-untyped-def,type-arg]
    params = {
        "response_type": "code", "client_id": client["client_id"], "redirect_uri": client["redirect_uris"][0],
        "code_challenge": challenge, "code_challenge_method": "S256", "state": "st-" + uuid.uuid4().hex,
        "resource": running.mcp_url, "scope": "memory:read memory:write", **overrides,
    }
    return running.auth_url + "/authorize?" + urlencode(params)


async def get_code(running, client: dict, challenge: str, browser: Browser | None = None, **overrides: str) -> str:  # type: ignore[no-untyped-def,type-arg]
    browser = browser or Browser(running)
    location = await browser.authorize(authorize_url(running, client, challenge, **overrides))
    query = parse_qs(urlsplit(location).query)
    assert "code" in query, location
    assert query["iss"] == [running.auth_url]  # RFC 9207
    return query["code"][0]


async def token_request(http: httpx.AsyncClient, running, client: dict, **form: str) -> httpx.Response:  # type: ignore[no-untyped-def,type-arg]
    data = {"client_id": client["client_id"], **form}
    if client.get("client_secret"):
        data["client_secret"] = client["client_secret"]
    return await http.post(running.auth_url + "/token", data=data)


async def tokens_for(http: httpx.AsyncClient, running, client: dict, scope: str = "memory:read memory:write",  # type: ignore[no-untyped-def,type-arg]
                     browser: Browser | None = None) -> dict:  # type: ignore[type-arg]
    verifier, challenge = pkce()
    code = await get_code(running, client, challenge, browser, scope=scope)
    r = await token_request(http, running, client, grant_type="authorization_code", code=code,
                            redirect_uri=client["redirect_uris"][0], code_verifier=verifier, resource=running.mcp_url)
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    return r.json()


async def gateway_status(http: httpx.AsyncClient, running, token: str) -> httpx.Response:  # type: ignore[no-untyped-def]
    return await http.post(running.mcp_url, json=LIST_TOOLS, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"})


def error_of(r: httpx.Response) -> str:
    return r.json()["error"]


# ---- the authorization code ----------------------------------------------------------------------

async def test_replayed_code_is_invalid_grant_and_revokes_what_it_issued(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(timeout=30) as http:
        client = await register(http, running)
        verifier, challenge = pkce()
        code = await get_code(running, client, challenge)
        form = dict(grant_type="authorization_code", code=code, redirect_uri=REDIRECT, code_verifier=verifier)
        first = await token_request(http, running, client, **form)
        assert first.status_code == 200
        assert (await gateway_status(http, running, first.json()["access_token"])).status_code == 200
        replay = await token_request(http, running, client, **form)
        assert replay.status_code == 400 and error_of(replay) == "invalid_grant"
        # RFC 6749 §4.1.2: the tokens issued from a replayed code are revoked. The gateway drops its cached
        # verdict when the revocation event reaches it (services/gateway/adapters/token_verifier.py): on a
        # busy machine that is a moment after the token endpoint answered, so it is given 10 s at most.
        deadline = asyncio.get_running_loop().time() + 10
        while (status := (await gateway_status(http, running, first.json()["access_token"])).status_code) == 200 \
                and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        assert status == 401


async def test_wrong_code_verifier_is_invalid_grant(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(timeout=30) as http:
        client = await register(http, running)
        verifier, challenge = pkce()
        code = await get_code(running, client, challenge)
        wrong = await token_request(http, running, client, grant_type="authorization_code", code=code,
                                    redirect_uri=REDIRECT, code_verifier=pkce()[0])
        assert wrong.status_code == 400 and error_of(wrong) == "invalid_grant"


async def test_mismatched_redirect_uri_is_invalid_grant(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(timeout=30) as http:
        client = await register(http, running, [REDIRECT, OTHER_REDIRECT])
        verifier, challenge = pkce()
        code = await get_code(running, client, challenge)
        r = await token_request(http, running, client, grant_type="authorization_code", code=code,
                                redirect_uri=OTHER_REDIRECT, code_verifier=verifier)
        assert r.status_code == 400 and error_of(r) == "invalid_grant"  # RFC 6749 §5.2
        # At /authorize an unregistered redirect_uri is never redirected to (RFC 6749 §4.1.2.1).
        unregistered = await http.get(authorize_url(running, client, challenge,
                                                    redirect_uri="http://127.0.0.1:53682/callback/extra"))
        assert unregistered.status_code == 400 and error_of(unregistered) == "invalid_request"


async def test_unknown_client_and_malformed_codes(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(timeout=30) as http:
        unknown = {"client_id": str(uuid.uuid4()), "client_secret": "x" * 64}
        r = await token_request(http, running, unknown, grant_type="authorization_code", code="egac_x",
                                redirect_uri=REDIRECT, code_verifier="v" * 43)
        assert r.status_code == 401 and error_of(r) == "invalid_client"
        junk = await token_request(http, running, {"client_id": "not\x00a-client"}, grant_type="authorization_code",
                                   code="c", code_verifier="v" * 43)
        assert junk.status_code == 401 and error_of(junk) == "invalid_client"
        client = await register(http, running)
        bad_secret = await token_request(http, running, {**client, "client_secret": "wrong"},
                                         grant_type="authorization_code", code="egac_x", code_verifier="v" * 43)
        assert bad_secret.status_code == 401 and error_of(bad_secret) == "invalid_client"
        for code in ("garbage", "egac_" + "A" * 43, "egac_\x00\x00", "x" * 5000):
            r = await token_request(http, running, client, grant_type="authorization_code", code=code,
                                    redirect_uri=REDIRECT, code_verifier="v" * 43)
            assert r.status_code == 400 and error_of(r) == "invalid_grant", (code[:10], r.text)
        missing = await token_request(http, running, client, grant_type="authorization_code")
        assert missing.status_code == 400 and error_of(missing) == "invalid_request"
        weird = await token_request(http, running, client, grant_type="password", username="a", password="b")
        assert weird.status_code == 400 and error_of(weird) in ("invalid_request", "unsupported_grant_type")
        not_form = await http.post(running.auth_url + "/token", content=b"--x\r\n",
                                   headers={"Content-Type": "multipart/form-data; boundary=nope"})
        assert not_form.status_code in (400, 401)
        unknown_authorize = await http.get(authorize_url(running, {"client_id": str(uuid.uuid4()),
                                                                   "redirect_uris": [REDIRECT]}, pkce()[1]))
        assert unknown_authorize.status_code == 400  # never a redirect to an unverified URI


async def test_authorization_requests_the_rfcs_refuse(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(timeout=30) as http:
        client = await register(http, running)
        _, challenge = pkce()

        async def error_redirect(**overrides: str) -> dict:  # type: ignore[type-arg]
            r = await http.get(authorize_url(running, client, challenge, **overrides))
            assert r.status_code == 302 and r.headers["location"].startswith(REDIRECT), r.text
            return parse_qs(urlsplit(r.headers["location"]).query)

        other = await error_redirect(resource="https://elsewhere.example/mcp")
        assert other["error"] == ["invalid_target"]  # RFC 8707 §2
        plain = await error_redirect(code_challenge_method="plain")
        assert plain["error"] == ["invalid_request"]  # OAuth 2.1: S256 only
        admin = await error_redirect(scope="memory:read admin")
        assert admin["error"] == ["invalid_scope"]
        assert (await error_redirect(code_challenge="short"))["error"] == ["invalid_request"]
        # RFC 7591: redirect URIs that may not be registered
        for uri in ("http://evil.example/cb", "https://ok.example/cb#frag", "javascript:alert(1)"):
            r = await http.post(running.auth_url + "/register", json={"redirect_uris": [uri]})
            assert r.status_code == 400 and r.json()["error"] in ("invalid_redirect_uri", "invalid_client_metadata"), uri


async def test_the_user_can_deny(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(timeout=30) as http:
        client = await register(http, running)
        location = await Browser(running, approve=False).authorize(authorize_url(running, client, pkce()[1], state="s1"))
        query = parse_qs(urlsplit(location).query)
        assert query["error"] == ["access_denied"] and query["state"] == ["s1"] and "code" not in query


# ---- refresh tokens --------------------------------------------------------------------------------

async def test_reusing_a_rotated_refresh_token_revokes_the_family(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(timeout=30) as http:
        client = await register(http, running)
        one = await tokens_for(http, running, client)
        r = await token_request(http, running, client, grant_type="refresh_token", refresh_token=one["refresh_token"])
        assert r.status_code == 200, r.text
        two = r.json()
        assert two["refresh_token"] != one["refresh_token"]
        assert (await gateway_status(http, running, two["access_token"])).status_code == 200
        reuse = await token_request(http, running, client, grant_type="refresh_token",
                                    refresh_token=one["refresh_token"])
        assert reuse.status_code == 400 and error_of(reuse) == "invalid_grant"
        # the whole family is gone: the newest refresh token and access token too
        newest = await token_request(http, running, client, grant_type="refresh_token",
                                     refresh_token=two["refresh_token"])
        assert newest.status_code == 400 and error_of(newest) == "invalid_grant"
        assert (await gateway_status(http, running, two["access_token"])).status_code == 401


async def test_refresh_cannot_widen_scope_or_cross_clients(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(timeout=30) as http:
        client, other = await register(http, running), await register(http, running)
        one = await tokens_for(http, running, client, scope="memory:read")
        wider = await token_request(http, running, client, grant_type="refresh_token",
                                    refresh_token=one["refresh_token"], scope="memory:read memory:write")
        assert wider.status_code == 400 and error_of(wider) == "invalid_scope"
        stolen = await token_request(http, running, other, grant_type="refresh_token",
                                     refresh_token=one["refresh_token"])
        assert stolen.status_code == 400 and error_of(stolen) == "invalid_grant"


# ---- the gateway as resource server ---------------------------------------------------------------

async def test_gateway_metadata_and_challenges(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(timeout=30) as http:
        for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
            meta = (await http.get(running.base_url + path)).json()
            assert meta["resource"] == running.mcp_url and meta["authorization_servers"] == [running.auth_url]
        at_gateway = (await http.get(running.base_url + "/.well-known/oauth-authorization-server")).json()
        at_auth = (await http.get(running.auth_url + "/.well-known/oauth-authorization-server")).json()
        assert at_gateway == at_auth and at_auth["issuer"] == running.auth_url
        assert at_auth["code_challenge_methods_supported"] == ["S256"]
        assert at_auth["registration_endpoint"] and at_auth["revocation_endpoint"]
        anonymous = await http.post(running.mcp_url, json=LIST_TOOLS, headers=MCP_HEADERS)
        challenge = anonymous.headers["www-authenticate"]
        assert anonymous.status_code == 401 and challenge.startswith("Bearer ")
        assert 'resource_metadata="' + running.base_url + '/.well-known/oauth-protected-resource/mcp"' in challenge
        assert 'scope="memory:read memory:write"' in challenge and "error=" not in challenge


async def test_bad_authorization_headers_are_401_never_500(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(timeout=30) as http:
        client = await register(http, running)
        good = (await tokens_for(http, running, client))["access_token"]
        cases = [
            [("Authorization", good)],  # no scheme
            [("Authorization", f"Bearer {good} {good}")],  # two tokens
            [("Authorization", f"Bearer {good}"), ("Authorization", f"Bearer {running.key}")],  # two headers
            [("Authorization", "Bearer")],
            [("Authorization", "Basic dXNlcjpwYXNz")],
            [("Authorization", "Bearer egat_" + "A" * 43)],
            [("Authorization", "Bearer " + "a" * 10_000)],
            [("Authorization", "Bearer ünïcode".encode())],
        ]
        for headers in cases:
            for url in (running.mcp_url, running.base_url + "/v1/whoami"):
                r = await http.request("POST" if url.endswith("/mcp") else "GET", url, headers=headers + list(
                    MCP_HEADERS.items()), json=LIST_TOOLS if url.endswith("/mcp") else None)
                assert r.status_code == 401, (str(headers[0][1])[:30], url, r.status_code, r.text[:200])
                assert 'error="invalid_token"' in r.headers["www-authenticate"]
        assert (await gateway_status(http, running, good)).status_code == 200


async def test_expired_and_foreign_audience_tokens_are_refused(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(timeout=30) as http:
        client = await register(http, running)
        expired = (await tokens_for(http, running, client))["access_token"]
        foreign = (await tokens_for(http, running, client))["access_token"]
        conn = await asyncpg.connect(running.stack.database_url)
        try:
            await conn.execute("UPDATE auth.oauth_access_tokens SET expires_at = now() - interval '1 minute' "
                               "WHERE token_hash = $1", hashlib.sha256(expired.encode()).hexdigest())
            # This server never mints a token for another resource; make one as another AS would have.
            await conn.execute(
                "UPDATE auth.oauth_grants SET resource = 'https://elsewhere.example/mcp' WHERE id = "
                "(SELECT grant_id FROM auth.oauth_access_tokens WHERE token_hash = $1)",
                hashlib.sha256(foreign.encode()).hexdigest(),
            )
        finally:
            await conn.close()
        for token in (expired, foreign):
            r = await gateway_status(http, running, token)
            assert r.status_code == 401 and 'error="invalid_token"' in r.headers["www-authenticate"]
            rest = await http.get(running.base_url + "/v1/whoami", headers={"Authorization": f"Bearer {token}"})
            assert rest.status_code == 401


async def test_missing_scope_is_403_insufficient_scope(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(timeout=30) as http:
        client = await register(http, running)
        read_only = (await tokens_for(http, running, client, scope="memory:read"))["access_token"]
        auth = {"Authorization": f"Bearer {read_only}"}
        assert (await http.post(running.base_url + "/v1/recall", json={"query": "x"}, headers=auth)).status_code == 200
        r = await http.post(running.base_url + "/v1/memories", json={"content": "nope"}, headers=auth)
        assert r.status_code == 403
        assert 'error="insufficient_scope"' in r.headers["www-authenticate"]
        assert 'scope="memory:write"' in r.headers["www-authenticate"]


# ---- the sign-in page ---------------------------------------------------------------------------

async def test_sign_in_needs_csrf_and_is_throttled(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(timeout=30) as http:
        client = await register(http, running)
        r = await http.get(authorize_url(running, client, pkce()[1]))
        request_id = parse_qs(urlsplit(r.headers["location"]).query)["request"][0]
        page = await http.get(f"{running.auth_url}/login?request={request_id}")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
        assert "engram_csrf" in page.headers["set-cookie"].lower() and "samesite=lax" in page.headers["set-cookie"].lower()
        no_csrf = await http.post(running.auth_url + "/login", data={"username": running.username,
                                                                     "password": running.password, "request": request_id})
        assert no_csrf.status_code == 403 and "engram_session" not in no_csrf.headers.get("set-cookie", "")
        cross_site = await http.post(running.auth_url + "/login", headers={"Origin": "https://evil.example"}, data={
            "username": running.username, "password": running.password, "request": request_id, "csrf": csrf})
        assert cross_site.status_code == 403
        target = f"nobody-{uuid.uuid4().hex[:8]}"
        statuses = []
        for _ in range(6):
            r = await http.post(running.auth_url + "/login", data={"username": target, "password": "wrong password!",
                                                                   "request": request_id, "csrf": csrf})
            statuses.append(r.status_code)
        assert statuses[:5] == [401] * 5 and statuses[5] == 429, statuses
        assert int(r.headers["retry-after"]) > 0
        consent_without_session = await httpx.AsyncClient().get(f"{running.auth_url}/consent?request={request_id}")
        assert consent_without_session.status_code == 303
        assert (await http.get(running.auth_url + "/signup")).status_code == 404  # sign-up is off by default


async def test_revoking_an_unknown_token_is_200(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(timeout=30) as http:
        client = await register(http, running)
        r = await http.post(running.auth_url + "/revoke", data={
            "token": "egat_nope", "client_id": client["client_id"], "client_secret": client["client_secret"]})
        assert r.status_code == 200  # RFC 7009 §2.2


async def test_disabling_a_user_ends_their_tokens_everywhere_at_once(running) -> None:  # type: ignore[no-untyped-def]
    from contracts.subjects import Names
    from deploy.client import admin_command
    from kit.bus import Bus
    from services.auth.domain.passwords import hash_password

    name, password = f"dora-{uuid.uuid4().hex[:6]}", "dora's long password"
    bus = await Bus.connect(running.stack.nats_url, Names(running.stack.o.namespace), name="engram-test")
    try:
        created = await admin_command(bus, "create_user", {"username": name, "password_hash": hash_password(password)})
        assert created.ok, created.error
        user_id = created.result["user_id"]
        async with httpx.AsyncClient(timeout=30) as http:
            client = await register(http, running)
            tokens = await tokens_for(http, running, client, browser=Browser(running, username=name, password=password))
            who = await http.get(running.base_url + "/v1/whoami", headers={"Authorization": f"Bearer {tokens['access_token']}"})
            assert who.status_code == 200 and who.json()["user_id"] == user_id  # now cached by the gateway
            disabled = await admin_command(bus, "disable_user", {"user_id": user_id})
            assert disabled.ok and disabled.result["disabled"]
            for _ in range(20):  # the UserDeactivated event reaches the gateway within milliseconds
                r = await gateway_status(http, running, tokens["access_token"])
                if r.status_code == 401:
                    break
                await asyncio.sleep(0.05)
            assert r.status_code == 401
            refresh = await token_request(http, running, client, grant_type="refresh_token",
                                          refresh_token=tokens["refresh_token"])
            assert refresh.status_code == 400 and error_of(refresh) == "invalid_grant"
            browser = Browser(running, username=name, password=password)
            with pytest.raises(AssertionError):
                await browser.authorize(authorize_url(running, client, pkce()[1]))
            assert browser.last.status_code == 401 and "Wrong username or password" in browser.last.text
    finally:
        await bus.close()
