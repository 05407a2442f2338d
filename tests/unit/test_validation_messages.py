"""A refused request names the field and the limit in words a person reads: an optional header or
field that was given but malformed used to say "header.Idempotency-Key.constrained-str: String should
match pattern …; header.Idempotency-Key.none: Input should be None" (pydantic's union members)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field, ValidationError

from services.gateway.main import readable_errors

pytestmark = pytest.mark.unit


class Body(BaseModel):
    key: str | None = Field(None, pattern=r"^[a-z]{8,}$")
    count: int


def test_an_optional_fields_none_alternative_and_union_member_names_are_left_out() -> None:
    pattern = "String should match pattern '^[A-Za-z0-9_.:-]{8,128}$'"
    raw = [  # as FastAPI reports a malformed Idempotency-Key header (seen from outside, 2026-12-05)
        {"type": "string_pattern_mismatch", "loc": ("header", "Idempotency-Key", "constrained-str"), "msg": pattern},
        {"type": "none_required", "loc": ("header", "Idempotency-Key", "none"), "msg": "Input should be None"},
    ]
    got = readable_errors(raw)
    assert [(e["loc"], e["msg"]) for e in got] == [(("header", "Idempotency-Key"), pattern)]
    assert readable_errors([{**raw[0], "loc": ("body", "when", "function-after[check(), str]")}])[0]["loc"] == (
        "body", "when")
    # a required field's own error, and errors of several fields, stay as they were
    with pytest.raises(ValidationError) as both:
        Body.model_validate({"key": "BAD"})
    kept = readable_errors(both.value.errors())
    assert {e["loc"] for e in kept} == {("key",), ("count",)}
    # only "none" errors (nothing else to say): kept
    only = [{"loc": ("body", "x"), "msg": "Input should be None", "type": "none_required"}]
    assert readable_errors(only) == only
