"""Issue 21's rules for the authorization server, without I/O: registration limits and schemes,
control characters and log escaping, which errors may be redirected, whose X-Forwarded-For is
believed, per-account sign-in counters, and the per-address token bucket."""

from __future__ import annotations

import logging

import pytest

from kit.edge import TokenBuckets, TrustedProxies, address_key
from services.auth.domain import oauth as rules
from services.auth.oauth.logsafe import LogSafeFilter

pytestmark = pytest.mark.unit


def test_only_reverse_domain_private_schemes_and_known_apps_may_be_registered() -> None:
    for ok in ("com.example.app:/oauth/cb", "com.example.app://cb", "cursor://anysphere.cursor-retrieval/oauth/callback",
               "https://claude.ai/api/mcp/auth_callback", "http://127.0.0.1:33418/cb"):
        assert rules.redirect_uri_problem(ok) is None, ok
    for bad in ("ms-msdt:/id PCWDiagnostic", "search-ms:query=x", "myapp://cb", "vscode://cb", "file:///etc/passwd"):
        assert rules.redirect_uri_problem(bad), bad
    assert "RFC 8252" in (rules.redirect_uri_problem("ms-msdt:/x") or "")
    assert rules.redirect_uri_problem("myapp://cb", app_schemes=("myapp",)) is None
    assert rules.redirect_uri_problem("cursor://x/cb", app_schemes=()) is not None


def test_registration_metadata_is_bounded_and_printable() -> None:
    ok = {"client_name": "Claude", "redirect_uris": ["https://claude.ai/cb"], "grant_types": ["authorization_code"]}
    assert rules.metadata_problem(ok) is None
    many = {**ok, "redirect_uris": [f"http://127.0.0.1:{1000 + i}/cb" for i in range(11)]}
    assert rules.metadata_problem(many) == "redirect_uris: at most 10 redirect URIs may be registered"
    long_uri = {**ok, "redirect_uris": ["https://a.example/" + "x" * 2000]}
    assert rules.metadata_problem(long_uri) == "redirect_uris[0]: at most 2000 characters"
    assert rules.metadata_problem({**ok, "client_name": "n" * 201}) == "client_name: at most 200 characters"
    assert rules.metadata_problem({**ok, "logo_uri": "https://a.example/" + "l" * 2000}) == "logo_uri: at most 2000 characters"
    assert rules.metadata_problem({**ok, "contacts": ["a@b.example"] * 6}) == "contacts: at most 5 contacts"
    assert "jwks" in (rules.metadata_problem({**ok, "jwks": {"keys": ["k" * 9000]}}) or "")
    forged = {**ok, "client_name": "x\n2026-01-01 INFO engram.auth.pages: user admin signed in"}
    assert rules.metadata_problem(forged) == "client_name must not contain control characters"
    for char in ("\r", "\x1b", "\x00", "\u2028", "\u202e", "\x85"):
        assert rules.metadata_problem({**ok, "software_id": f"a{char}b"}) == "software_id must not contain control characters"
    assert rules.metadata_problem({**ok, "jwks": {"keys": [{"kid": "a\nb"}]}}) == "jwks.keys[0].kid must not contain control characters"
    smaller = rules.MetadataLimits(redirect_uris=2)
    assert rules.metadata_problem({**ok, "redirect_uris": ["https://a.example/1"] * 3}, smaller)
    assert rules.metadata_problem({**ok, "client_name": "Zoë’s app ✨"}) is None  # unicode text is fine


def test_log_lines_escape_control_characters() -> None:
    assert rules.log_safe("evil\n2026 INFO forged") == "evil\\n2026 INFO forged"
    assert rules.log_safe("a\rb\x1b[31m\u2028c") == "a\\rb\\x1b[31m\\u2028c"
    assert rules.log_safe("x" * 500, 10) == "x" * 10 + "…"
    record = logging.LogRecord("engram.auth.oauth", logging.INFO, __file__, 1, "registered %s (%s)",
                               ("id", "name\nforged line"), None)
    assert LogSafeFilter().filter(record) and record.getMessage() == "registered id (name\\nforged line)"


def test_only_vetted_redirect_uris_receive_errors_without_the_user() -> None:
    assert rules.may_redirect_errors("http://127.0.0.1:53682/cb?error=invalid_scope", user_has_grant=False)
    assert rules.may_redirect_errors("http://localhost:1/cb?error=x", user_has_grant=False)
    assert rules.may_redirect_errors("http://[::1]:1/cb?error=x", user_has_grant=False)
    assert not rules.may_redirect_errors("https://evil.example/phish?error=x", user_has_grant=False)
    assert not rules.may_redirect_errors("com.example.app:/cb?error=x", user_has_grant=False)
    assert not rules.may_redirect_errors("https://127.0.0.1.evil.example/cb?error=x", user_has_grant=False)
    assert rules.may_redirect_errors("https://claude.ai/api/mcp/auth_callback?error=x", user_has_grant=True)


def test_forwarded_for_is_believed_from_configured_proxies_only() -> None:
    """The auth server counts requests by kit's edge rule (the gateway's too)."""
    none, proxies = TrustedProxies(""), TrustedProxies("10.0.0.0/8, 192.0.2.7")

    def request_address(peer: str | None, forwarded: list[str], trusted: TrustedProxies) -> str:
        return rules.client_address(trusted.client(peer, forwarded))

    # no proxies configured: the socket peer, whatever the header says
    assert request_address("127.0.0.1", ["1.2.3.4"], none) == "127.0.0.1"
    # from a configured proxy: the rightmost hop that is not a proxy
    assert request_address("192.0.2.7", ["198.51.100.9, 10.1.2.3"], proxies) == "198.51.100.9"
    assert request_address("192.0.2.7", ["6.6.6.6, 198.51.100.9"], proxies) == "198.51.100.9"  # forged left part ignored
    assert request_address("192.0.2.7", ["[2001:db8::1]:443"], proxies) == "2001:db8::1"
    assert request_address("192.0.2.7", ["198.51.100.9:5123"], proxies) == "198.51.100.9"
    assert request_address("192.0.2.7", ["garbage"], proxies) == "192.0.2.7"  # stops at the proxy
    assert request_address("192.0.2.7", [], proxies) == "192.0.2.7"
    # not from a proxy: the header is ignored
    assert request_address("203.0.113.5", ["1.2.3.4"], proxies) == "203.0.113.5"
    assert request_address(None, ["1.2.3.4"], proxies) == "unknown"
    with pytest.raises(ValueError, match="ENGRAM_TRUSTED_PROXIES"):
        TrustedProxies("10.0.0.1, not-an-ip")
    assert not TrustedProxies("")


def test_failed_sign_ins_count_per_account_whatever_the_address() -> None:
    counters = rules.sign_in_counters("Alice", "10.0.0.1")
    assert counters == [("user:alice|10.0.0.1", rules.FREE_FAILURES), ("addr:10.0.0.1", rules.FREE_FAILURES_PER_ADDRESS),
                        ("acct:alice", rules.FREE_FAILURES_PER_ACCOUNT)]
    assert rules.sign_in_counters("ALICE", "10.9.9.9")[2][0] == "acct:alice"  # the same account from anywhere
    assert rules.lockout_after(rules.FREE_FAILURES_PER_ACCOUNT - 1, rules.FREE_FAILURES_PER_ACCOUNT).total_seconds() == 0
    assert rules.lockout_after(rules.FREE_FAILURES_PER_ACCOUNT, rules.FREE_FAILURES_PER_ACCOUNT).total_seconds() == 30


def test_token_bucket_per_address() -> None:
    limiter = TokenBuckets(per_minute=60, burst=3)  # one a second
    assert [limiter.take("a", now=100.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("a", now=100.0) == pytest.approx(1.0)
    assert limiter.take("b", now=100.0) == 0.0  # another address has its own bucket
    assert limiter.take("a", now=101.0) == 0.0  # refilled
    assert limiter.take("a", now=10_000.0) == 0.0  # never more than the capacity
    assert [limiter.take("a", now=10_000.0) for _ in range(3)][-1] > 0
    small = TokenBuckets(per_minute=1, burst=1, max_keys=2)
    for key in ("x", "y", "z"):
        small.take(key, now=0.0)
    assert len(small._buckets) == 2
    assert address_key("2001:db8:1:2:3:4:5:6") == address_key("2001:db8:1:2:ffff::1") == "ip:2001:db8:1:2::/64"
    assert address_key("::ffff:192.0.2.1") == "ip:192.0.2.1" and address_key("198.51.100.1") == "ip:198.51.100.1"


def test_client_ids_are_uuids() -> None:
    assert rules.looks_like_client_id("0f8fad5b-d9cb-469f-a165-70867728950e")
    assert not rules.looks_like_client_id("not\x00a-client") and not rules.looks_like_client_id("")
