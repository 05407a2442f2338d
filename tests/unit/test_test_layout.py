"""The test folders have no __init__.py (pytest's default import mode): two test files with the
same name in different folders break the collection of the whole suite, though each folder alone
runs fine. Caught here, in the fast tests, instead of by `make test`."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_file_name_is_unique_across_folders() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert not [n for n, count in names.items() if count > 1], sorted(n for n, c in names.items() if c > 1)
