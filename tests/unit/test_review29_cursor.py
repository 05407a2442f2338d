"""Issue 29 L3: a forged graph cursor whose place is past a Postgres bigint is refused at decode
as an invalid ``cursor`` (it reached asyncpg, which raised OverflowError: "internal")."""

from __future__ import annotations

import base64
import json

import pytest

from contracts.errors import ErrorCode, ServiceError
from services.graph.domain.model import decode_cursor, encode_cursor

pytestmark = pytest.mark.unit


def raw_cursor(seq: object, digest: str = "abc") -> str:
    data = json.dumps({"v": 1, "s": seq, "f": digest}).encode()
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


@pytest.mark.parametrize("seq", [2**63, 2**64, -1, 10**40, 1.5, True, "5"])
def test_a_place_no_cursor_could_hold_is_refused_naming_cursor(seq: object) -> None:
    with pytest.raises(ServiceError) as refused:
        decode_cursor(raw_cursor(seq), "abc")
    assert refused.value.field == "cursor"
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT


def test_the_largest_bigint_and_an_issued_cursor_still_decode() -> None:
    assert decode_cursor(raw_cursor(2**63 - 1), "abc") == 2**63 - 1
    assert decode_cursor(encode_cursor(42, "abc"), "abc") == 42
