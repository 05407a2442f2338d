"""tests/compose runs only under `make compose-test` (ENGRAM_COMPOSE_TEST=1): it builds images and
runs the whole compose stack in podman containers, minutes of work that `make test` must not do.
Otherwise nothing here is collected. Its tests carry the `compose` marker."""

from __future__ import annotations

import os

import pytest

collect_ignore_glob = [] if os.environ.get("ENGRAM_COMPOSE_TEST") == "1" else ["test_*.py"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "compose: the compose stack in podman containers (`make compose-test`)")
