"""API key rules, the caller's principal and the model-facing text, without I/O."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from mcp.server.auth.provider import AccessToken

from contracts.auth import Scope
from contracts.memory import RecallHit
from services.auth.domain import keys
from services.gateway.presentation import MAX_OUTPUT_CHARS, cap, format_recall
from services.gateway.principal import AccessDenied, Principal

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 29, tzinfo=UTC)


def test_keys_are_prefixed_random_and_stored_hashed() -> None:
    a, b = keys.generate_key(), keys.generate_key()
    assert a.secret.startswith("egm_") and a.secret != b.secret
    assert len(a.secret) >= 4 + 43  # 256 bits, url-safe base64
    assert a.hash == keys.hash_key(a.secret) and a.secret not in a.hash
    assert keys.same_hash(a.hash, keys.hash_key(a.secret))
    assert a.display_prefix == a.secret[:12]


def test_key_usability() -> None:
    assert keys.is_usable(None, None, False, NOW)
    assert not keys.is_usable(NOW, None, False, NOW)
    assert not keys.is_usable(None, NOW - timedelta(seconds=1), False, NOW)
    assert not keys.is_usable(None, None, True, NOW)
    assert not keys.looks_like_key("Bearer something")


def token(scopes: list[str], project: str | None = None) -> AccessToken:
    return AccessToken(token="t", client_id="apikey:1", scopes=scopes, subject="u1",
                       claims={"key_id": "1", "project": project})


def test_scopes_are_enforced() -> None:
    reader = Principal.from_token(token([Scope.MEMORY_READ.value]))
    reader.require(Scope.MEMORY_READ)
    with pytest.raises(AccessDenied):
        reader.require(Scope.MEMORY_WRITE)
    Principal.from_token(token([Scope.ADMIN.value])).require(Scope.MEMORY_WRITE)


def test_project_restricted_key() -> None:
    p = Principal.from_token(token([Scope.MEMORY_READ.value], project="work"))
    assert p.project_for(None) == "work" and p.search_project(None) == "work"
    with pytest.raises(AccessDenied):
        p.project_for("home")
    free = Principal.from_token(token([Scope.MEMORY_READ.value]))
    assert free.project_for(None) == "default" and free.search_project(None) is None


def test_recall_text_is_compact_and_capped() -> None:
    when = "2026-11-29T00:00:00Z"
    hit = RecallHit.model_validate({"score": 0.5, "memory": {
        "content": "c" * 1000, "project": "p", "created_at": when, "updated_at": when, "id": str(uuid.uuid4()),
        "importance": 3, "confidence": 0.8, "source": "mcp", "version": 1, "status": "active"}})
    text = format_recall("q", [hit] * 300, None)
    assert len(text) <= MAX_OUTPUT_CHARS and text.endswith("narrow the query)")
    assert text.splitlines()[1].startswith("Legend:")
    assert "No memories" in format_recall("q", [], "p")
    assert cap("short") == "short"
