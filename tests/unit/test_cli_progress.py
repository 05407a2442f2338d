"""Replay progress where no progress bar can be drawn (a log, CI, kubectl logs): plain lines."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from deploy.cli import ProgressLines

pytestmark = pytest.mark.unit


def test_lines_every_interval_and_at_the_end() -> None:
    out = io.StringIO()
    lines = ProgressLines(Console(file=out, width=200), every_s=3600)
    lines(0, 1000)
    lines(500, 1000)  # within the interval: quiet
    lines(1000, 1000)  # the end is always reported
    printed = out.getvalue().splitlines()
    assert printed == [printed[0]] and printed[0].startswith("replaying events: 1,000/1,000 (100%), ")
    assert "events/s" in printed[0] and "left" not in printed[0]


def test_every_call_when_the_interval_is_zero() -> None:
    out = io.StringIO()
    lines = ProgressLines(Console(file=out, width=200), every_s=0)
    lines(250, 1000)
    assert "250/1,000 (25%)" in out.getvalue() and "min left" in out.getvalue()
