"""Which Postgres errors make a message poison (dead-lettered at once) and which are retried."""

from __future__ import annotations

import asyncpg
import pytest

from kit.pg import deterministic_error

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("exc", [
    asyncpg.exceptions.CharacterNotInRepertoireError("invalid byte sequence for encoding UTF8: 0x00"),
    asyncpg.exceptions.NumericValueOutOfRangeError("value out of range"),
    asyncpg.exceptions.InvalidTextRepresentationError("invalid input syntax for type uuid"),
    asyncpg.exceptions.NotNullViolationError("null value in column"),
    asyncpg.exceptions.CheckViolationError("violates check constraint"),
])
def test_errors_the_same_data_raises_again_are_poison(exc: Exception) -> None:
    assert deterministic_error(exc)
    try:  # also when a handler wrapped it
        raise RuntimeError("save failed") from exc
    except RuntimeError as wrapped:
        assert deterministic_error(wrapped)


@pytest.mark.parametrize("exc", [
    asyncpg.exceptions.UniqueViolationError("duplicate key"),  # a concurrent writer: gone on retry
    asyncpg.exceptions.SerializationError("could not serialize access"),
    asyncpg.exceptions.DeadlockDetectedError("deadlock detected"),
    asyncpg.exceptions.UndefinedTableError("relation does not exist"),  # fixed by an operator, then re-driven
    asyncpg.exceptions.AdminShutdownError("terminating connection"),
    ConnectionResetError("connection reset"),
    ValueError("not Postgres"),
])
def test_other_errors_are_retried(exc: Exception) -> None:
    assert not deterministic_error(exc)
