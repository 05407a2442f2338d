"""The OAuth rules without I/O: PKCE, passwords, refresh rotation, redirect URIs, resources,
scopes, throttling, CSRF; and the gateway's audience check and challenges."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from starlette.requests import HTTPConnection

from contracts.auth import TokenInfo, same_resource
from contracts.envelope import Reply
from services.auth.domain import oauth as rules
from services.auth.domain import passwords
from services.gateway.adapters.token_verifier import IntrospectionVerifier, StrictBearerBackend
from services.gateway.principal import bearer_challenge

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 29, tzinfo=UTC)
MCP = "https://memory.example.com/mcp"


# PKCE -------------------------------------------------------------------------------------------
def test_pkce_s256_matches_the_rfc_7636_example() -> None:
    verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"  # RFC 7636 Appendix B
    assert rules.s256(verifier) == challenge
    assert rules.pkce_matches(verifier, challenge)
    assert not rules.pkce_matches(verifier[:-1] + "l", challenge)
    assert not rules.pkce_matches("short", rules.s256("short"))  # < 43 characters
    assert not rules.pkce_matches("a" * 42 + "!", rules.s256("a" * 42 + "!"))  # not unreserved
    assert not rules.pkce_matches(challenge, challenge)  # "plain" is not accepted
    assert rules.valid_challenge(challenge) and not rules.valid_challenge("plain-text") and not rules.valid_challenge("")


# passwords --------------------------------------------------------------------------------------
def test_passwords_are_salted_scrypt_and_verified_in_constant_time() -> None:
    stored = passwords.hash_password("correct horse battery")
    assert stored.startswith("scrypt$15$8$1$") and "correct" not in stored
    assert passwords.is_valid_hash(stored) and not passwords.needs_rehash(stored)
    assert passwords.hash_password("correct horse battery") != stored  # a fresh salt each time
    assert passwords.verify_password("correct horse battery", stored)
    assert not passwords.verify_password("correct horse batterY", stored)
    assert not passwords.verify_password("anything at all", None)  # unknown user: same work, no
    assert not passwords.verify_password("x" * 2000, stored)
    assert not passwords.verify_password("correct horse battery", "scrypt$99$8$1$AAAA$BBBB")


def test_password_policy_and_old_parameters() -> None:
    with pytest.raises(passwords.WeakPassword):
        passwords.hash_password("short")
    weaker = "scrypt$14$8$1$" + "A" * 22 + "$" + "B" * 43
    assert passwords.is_valid_hash(weaker) and passwords.needs_rehash(weaker)
    assert not passwords.is_valid_hash("bcrypt$whatever")


# tokens -----------------------------------------------------------------------------------------
def test_tokens_are_prefixed_256_bit_and_stored_hashed() -> None:
    a, b = rules.new_access_token(), rules.new_access_token()
    assert a.startswith("egat_") and a != b and len(a) >= 5 + 43
    assert rules.new_refresh_token().startswith("egrt_") and rules.new_code().startswith("egac_")
    assert rules.same_secret(a, rules.hash_secret(a)) and not rules.same_secret(b, rules.hash_secret(a))
    assert a not in rules.hash_secret(a)
    assert rules.looks_like(a, "egat_") and not rules.looks_like("egat_short", "egat_")


# refresh rotation --------------------------------------------------------------------------------
def state(**over: Any) -> rules.RefreshState:
    base = dict(client_id="c1", expires_at=NOW + timedelta(days=1), rotated_at=None, revoked=False, user_disabled=False)
    return rules.RefreshState(**{**base, **over})


def test_refresh_rotation_and_reuse_detection() -> None:
    V = rules.RefreshVerdict
    assert rules.refresh_verdict(state(), "c1", NOW) is V.OK
    assert rules.refresh_verdict(state(rotated_at=NOW), "c1", NOW) is V.REUSED  # → the family is revoked
    assert rules.refresh_verdict(state(rotated_at=NOW, revoked=True), "c1", NOW) is V.INVALID  # already revoked
    assert rules.refresh_verdict(state(), "other-client", NOW) is V.INVALID
    assert rules.refresh_verdict(state(rotated_at=NOW), "other-client", NOW) is V.INVALID  # no DoS by a stranger
    assert rules.refresh_verdict(state(expires_at=NOW), "c1", NOW) is V.INVALID
    assert rules.refresh_verdict(state(revoked=True), "c1", NOW) is V.INVALID
    assert rules.refresh_verdict(state(user_disabled=True), "c1", NOW) is V.INVALID


# redirect URIs ---------------------------------------------------------------------------------
def test_redirect_uris_match_exactly() -> None:
    registered = ["http://127.0.0.1:33418/callback", "https://claude.ai/api/mcp/auth_callback"]
    assert rules.redirect_uri_registered("http://127.0.0.1:33418/callback", registered)
    for near_miss in (
        "http://127.0.0.1:33418/callback/", "http://127.0.0.1:33418/callback/evil", "http://127.0.0.1:33418/callbac",
        "http://127.0.0.1:33419/callback", "https://claude.ai/api/mcp/auth_callback?x=1",
        "https://claude.ai.evil.example/api/mcp/auth_callback", "HTTPS://claude.ai/api/mcp/auth_callback",
    ):
        assert not rules.redirect_uri_registered(near_miss, registered), near_miss


def test_which_redirect_uris_may_be_registered() -> None:
    for ok in ("https://claude.ai/api/mcp/auth_callback", "http://127.0.0.1:6274/cb", "http://localhost:1/cb",
               "http://[::1]:8080/cb", "cursor://anysphere.cursor-retrieval/oauth/callback"):
        assert rules.redirect_uri_problem(ok) is None, ok
    for bad in ("http://evil.example/cb", "https://x.example/cb#frag", "javascript:alert(1)", "data:text/html,x",
                "/relative/cb", "https:///nohost"):
        assert rules.redirect_uri_problem(bad), bad


# resources and scopes ---------------------------------------------------------------------------
def test_resource_indicators() -> None:
    assert rules.same_resource(MCP, "HTTPS://Memory.Example.com:443/mcp/")
    assert not rules.same_resource(MCP, "https://memory.example.com/mcp2")
    assert not rules.same_resource(MCP, "https://memory.example.com:8443/mcp")
    assert rules.resource_problem(None, MCP) is None  # bound to ours
    assert rules.resource_problem(MCP, MCP) is None
    assert rules.resource_problem("https://elsewhere.example/mcp", MCP)
    assert rules.resource_problem(MCP + "#x", MCP)
    assert same_resource(MCP, "https://memory.example.com/mcp/") and not same_resource(MCP, None)


def test_grantable_scopes() -> None:
    assert rules.grantable_scopes(None, None, ["memory:read", "memory:write"]) == ["memory:read", "memory:write"]
    assert rules.grantable_scopes(None, "memory:read", ["memory:write"]) == ["memory:read"]
    assert rules.grantable_scopes(["memory:write", "memory:read"], None, []) == ["memory:read", "memory:write"]
    assert rules.grantable_scopes(["admin"], None, []) is None  # never through OAuth
    assert rules.grantable_scopes(["memory:everything"], None, []) is None


# throttling and CSRF ----------------------------------------------------------------------------
def test_login_backoff() -> None:
    assert [rules.lockout_after(n) for n in range(5)] == [timedelta(0)] * 5
    assert rules.lockout_after(5) == timedelta(seconds=30) and rules.lockout_after(6) == timedelta(seconds=60)
    assert rules.lockout_after(100) == rules.MAX_LOCKOUT
    assert rules.lockout_after(29, rules.FREE_FAILURES_PER_ADDRESS) == timedelta(0)
    user_key, addr_key = rules.throttle_keys("Alice", "10.0.0.1")
    assert user_key == "user:alice|10.0.0.1" and addr_key == "addr:10.0.0.1"
    assert rules.client_address("::1") == "::1" and rules.client_address("bogus\n") == "unknown"


def test_csrf_and_origin() -> None:
    token = rules.new_secret()
    assert rules.csrf_ok(token, token)
    assert not rules.csrf_ok(token, rules.new_secret()) and not rules.csrf_ok("", "") and not rules.csrf_ok(token, None)
    assert not rules.csrf_ok("short", "short")
    issuer = "https://auth.example.com"
    assert rules.origin_ok(None, issuer) and rules.origin_ok("https://auth.example.com", issuer)
    assert not rules.origin_ok("https://evil.example", issuer) and not rules.origin_ok("null", issuer)


# the gateway --------------------------------------------------------------------------------------
def test_challenges() -> None:
    meta = "https://m.example/.well-known/oauth-protected-resource/mcp"
    assert bearer_challenge(meta, "memory:read memory:write") == (
        f'Bearer resource_metadata="{meta}", scope="memory:read memory:write"'
    )
    assert bearer_challenge(meta, "memory:read", "invalid_token", "expired").startswith(
        'Bearer error="invalid_token", error_description="expired", resource_metadata='
    )


class FakeBus:
    def __init__(self, info: TokenInfo) -> None:
        self.info = info
        self.asked = 0

    async def query(self, *args: Any, **kwargs: Any) -> Reply[Any]:
        self.asked += 1
        return Reply.success(self.info.model_dump(mode="json"))


async def test_the_verifier_refuses_tokens_for_another_audience() -> None:
    good = TokenInfo(active=True, tenant="u1", client_id="c", scopes=["memory:read"], resource=MCP, grant_id="g1")
    verifier = IntrospectionVerifier(FakeBus(good), resource=MCP)  # type: ignore[arg-type]
    token = await verifier.verify_token("egat_" + "a" * 43)
    assert token is not None and token.resource == MCP and token.subject == "u1"

    foreign = good.model_copy(update={"resource": "https://elsewhere.example/mcp"})
    assert await IntrospectionVerifier(FakeBus(foreign), resource=MCP).verify_token("egat_" + "b" * 43) is None  # type: ignore[arg-type]

    api_key = TokenInfo(active=True, tenant="u1", client_id="apikey:x", scopes=["memory:read"])  # no audience
    assert await IntrospectionVerifier(FakeBus(api_key), resource=MCP).verify_token("egm_" + "c" * 43) is not None  # type: ignore[arg-type]

    bus = FakeBus(good)
    v = IntrospectionVerifier(bus, resource=MCP)  # type: ignore[arg-type]
    for junk in ("a b", "tok,en", "", "x" * 5000, "ünï"):
        assert await v.verify_token(junk) is None
    assert bus.asked == 0  # malformed tokens never reach the auth service


async def test_revocation_events_clear_the_cache() -> None:
    bus = FakeBus(TokenInfo(active=True, tenant="u1", client_id="c", scopes=[], resource=MCP, grant_id="g1"))
    v = IntrospectionVerifier(bus, resource=MCP)  # type: ignore[arg-type]
    await v.verify_token("egat_" + "a" * 43)
    await v.verify_token("egat_" + "a" * 43)
    assert bus.asked == 1
    v.forget_grant("g1")
    await v.verify_token("egat_" + "a" * 43)
    assert bus.asked == 2
    v.forget_tenant("u1")
    await v.verify_token("egat_" + "a" * 43)
    assert bus.asked == 3


def conn(*headers: tuple[bytes, bytes]) -> HTTPConnection:
    return HTTPConnection({"type": "http", "headers": list(headers), "method": "GET", "path": "/", "query_string": b""})


async def test_strict_bearer_backend() -> None:
    bus = FakeBus(TokenInfo(active=True, tenant="u1", client_id="c", scopes=["memory:read"], resource=MCP))
    backend = StrictBearerBackend(IntrospectionVerifier(bus, resource=MCP))  # type: ignore[arg-type]
    token = b"egat_" + b"a" * 43
    assert await backend.authenticate(conn((b"authorization", b"Bearer " + token))) is not None
    for headers in (
        [(b"authorization", token)],
        [(b"authorization", b"Bearer " + token + b" " + token)],
        [(b"authorization", b"Bearer " + token), (b"authorization", b"Bearer " + token)],
        [(b"authorization", b"Basic dXNlcjpwYXNz")],
        [(b"authorization", b"Bearer ")],
        [],
    ):
        assert await backend.authenticate(conn(*headers)) is None, headers
