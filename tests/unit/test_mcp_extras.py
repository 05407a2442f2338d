"""The rules of the MCP utilities (services/gateway/entrypoints/mcp_extras.py) without I/O: which
log levels pass a session's threshold, how sessions' levels are kept, which projects a caller is
offered, and which POSTs are answered with a stream."""

from __future__ import annotations

import json

import pytest

from services.gateway.entrypoints.mcp_extras import (
    LEVELS,
    LOG_LEVEL_META_KEY,
    MAX_COMPLETIONS,
    SessionLevels,
    at_or_above,
    complete_from,
    may_notify,
    rate_warning,
    reachable_projects,
    template_project,
)
from services.gateway.operations import Caller
from services.gateway.principal import AccessDenied, Principal

pytestmark = pytest.mark.unit


def who(project: str | None = None) -> Principal:
    return Principal(tenant="u1", client_id="k", scopes=frozenset({"memory:read"}), key_id="k1", project=project)


def test_levels_are_the_specs_in_order_of_severity() -> None:
    assert LEVELS == ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
    assert at_or_above("warning", "info") and at_or_above("info", "info")
    assert not at_or_above("info", "warning") and not at_or_above("debug", "info")


def test_session_levels_are_kept_per_key_bounded_and_forgotten_when_idle() -> None:
    levels = SessionLevels(max_sessions=2, ttl_s=60)
    levels.set(("cred", "s1"), "info", now=0)
    levels.set(("cred", "s2"), "warning", now=1)
    assert levels.get(("cred", "s1"), now=2) == "info"  # s1 used: s2 is now the oldest
    levels.set(("cred", "s3"), "error", now=3)
    assert levels.get(("cred", "s2"), now=4) is None
    assert levels.get(("other", "s1"), now=4) is None  # another credential presenting the session id
    assert levels.get(("cred", "s3"), now=4) == "error"
    assert levels.get(("cred", "s3"), now=65) is None  # idle over a minute: gone
    assert levels.get(None) is None


def test_completion_offers_prefix_matches_first_then_contained_any_case_at_most_100() -> None:
    names = ["work", "Workshop", "homework", "home", "garden"]
    assert complete_from(names, "wor").values == ["Workshop", "work", "homework"]
    assert complete_from(names, "").values == sorted(names)
    assert complete_from(names, "zzz").values == []
    many = complete_from([f"p{i:03}" for i in range(150)], "p")
    assert len(many.values) == MAX_COMPLETIONS and many.total == 150 and many.has_more is True


def test_a_restricted_key_or_a_pinned_connection_is_offered_its_one_project() -> None:
    listed = ["home", "work", "garden"]
    assert reachable_projects(Caller(who(), None), listed) == listed
    assert reachable_projects(Caller(who("work"), None), listed) == ["work"]
    assert reachable_projects(Caller(who(), "garden"), listed) == ["garden"]
    assert reachable_projects(Caller(who("work"), "work"), listed) == ["work"]
    assert reachable_projects(Caller(who("work"), "home"), listed) == []  # the two disagree: nothing


def test_a_template_names_a_project_only_the_caller_may_read() -> None:
    assert template_project(Caller(who(), None), "home") == "home"
    assert template_project(Caller(who("work"), None), "work") == "work"
    with pytest.raises(AccessDenied, match="restricted to project 'work'"):
        template_project(Caller(who("work"), None), "home")
    assert template_project(Caller(who(), "garden"), "garden") == "garden"
    with pytest.raises(AccessDenied, match="pinned to project 'garden'"):
        template_project(Caller(who(), "garden"), "home")


def call(meta: dict[str, object] | None = None, method: str = "tools/call") -> bytes:
    params: dict[str, object] = {"name": "save_memories", "arguments": {}}
    if meta is not None:
        params["_meta"] = meta
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()


STREAM = {"accept": "application/json, text/event-stream"}


def test_only_a_tool_call_that_may_carry_notifications_is_streamed() -> None:
    assert may_notify(call({"progressToken": 7}), STREAM)
    assert may_notify(call({LOG_LEVEL_META_KEY: "info"}), STREAM)
    assert not may_notify(call(), STREAM)  # nothing asked: plain JSON, as before
    assert not may_notify(call({LOG_LEVEL_META_KEY: "loud"}), STREAM)  # not a level
    assert not may_notify(call({"progressToken": 7}), {"accept": "application/json"})  # no stream accepted
    assert not may_notify(call({"progressToken": 7}, method="tools/list"), STREAM)
    assert not may_notify(b"progressToken{not json", STREAM)
    assert not may_notify(None, STREAM)


def test_a_credential_is_warned_when_its_rate_limit_bucket_runs_low() -> None:
    assert rate_warning(60, 60, 600) is None
    assert rate_warning(6, 60, 600) is None  # a tenth left: not yet
    warning = rate_warning(5.5, 60, 600)
    assert warning is not None and "5 of 60 requests left" in warning and "600 per minute" in warning
    assert "0 of 60" in (rate_warning(-3, 60, 600) or "")  # in debt (a large body): never negative
