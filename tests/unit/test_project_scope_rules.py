"""The one project scope a call carries: a key's restriction, else the connection's pin; and the
rules the owning service applies with it (kit's Call)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp.server.auth.provider import AccessToken

from contracts.errors import ServiceError
from kit.service import Call
from services.gateway.operations import Caller
from services.gateway.principal import AccessDenied, Principal

pytestmark = pytest.mark.unit

project = st.sampled_from(("work", "home", "default"))


def principal(restricted: str | None) -> Principal:
    claims = {"project": restricted} if restricted else {}
    return Principal.from_token(AccessToken(token="t", client_id="c", scopes=["memory:read"], subject="u",
                                            claims=claims))


@given(restricted=st.one_of(st.none(), project), pin=st.one_of(st.none(), project),
       requested=st.one_of(st.none(), project))
def test_the_scope_is_the_restriction_else_the_pin(restricted, pin, requested) -> None:  # type: ignore[no-untyped-def]
    c = Caller(principal(restricted), pin)
    assert c.project_scope == (restricted or pin)
    try:
        chosen = c.project(requested)
    except AccessDenied:
        assert restricted is not None and (requested or pin) not in (None, restricted)
        return
    # whatever a call works in lies inside its scope
    assert c.project_scope is None or chosen == c.project_scope or (restricted is None and requested == chosen)


@given(scope=st.one_of(st.none(), project), requested=st.one_of(st.none(), project), where=project)
def test_a_scoped_call_reaches_only_its_project(scope, requested, where) -> None:  # type: ignore[no-untyped-def]
    call = Call(tenant="u", correlation_id="c", project_scope=scope)
    assert call.sees(where) == (scope is None or where == scope)
    if scope is not None and requested is not None and requested != scope:
        with pytest.raises(ServiceError) as denied:
            call.search_project(requested)
        assert denied.value.code == "permission_denied" and denied.value.field == "project"
    else:
        assert call.search_project(requested) == (requested if requested is not None else scope)


@given(held=st.sets(st.sampled_from(("memory:read", "memory:write", "memory:maintenance", "keys:manage"))),
       asked=st.lists(st.sampled_from(("memory:read", "memory:write", "memory:maintenance")), min_size=1, max_size=3))
def test_a_key_of_ones_own_gets_at_most_the_asking_credentials_scopes(held, asked) -> None:  # type: ignore[no-untyped-def]
    from contracts.auth import CreateMyApiKey
    from services.gateway.operations import _owner

    c = Caller(Principal(tenant="u", client_id="c", scopes=frozenset(held)))
    try:
        _owner(c, CreateMyApiKey(scopes=asked))
    except AccessDenied as refused:
        assert not set(asked) <= held and refused.field == "scopes"
        return
    assert set(asked) <= held


def test_a_credential_acting_for_a_user_cannot_manage_that_users_keys() -> None:
    from contracts.auth import ListMyApiKeys
    from services.gateway.operations import _owner

    delegated = Caller(Principal(tenant="u", client_id="svc", scopes=frozenset({"keys:manage", "memory:act-as"}),
                                 actor="service-user"))
    with pytest.raises(AccessDenied, match="acts for user u"):
        _owner(delegated, ListMyApiKeys())
