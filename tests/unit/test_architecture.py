"""Service boundaries, checked by import-linter (contracts in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def test_services_import_only_contracts_never_each_other() -> None:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    proc = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_contracts_do_no_io() -> None:
    forbidden = ("open(", "socket", "asyncio.", "httpx", "requests", "subprocess", "os.environ")
    for path in (ROOT / "contracts").rglob("*.py"):
        text = path.read_text()
        for word in forbidden:
            assert word not in text, f"{path.relative_to(ROOT)} uses {word!r}: contracts must stay pure"


def test_events_are_parsed_in_kit_only() -> None:
    """Consumers receive typed events (``kit.events``: ``data`` is the aggregate's declared model):
    no service parses an event message itself (``json.loads`` of a message, ``EventEnvelope``
    validation), validates an event's ``data`` into a model, or reads it as a dict."""
    import re

    forbidden = {
        r"json\.loads\(\s*(msg|m|raw|message)\.data": "json.loads of a message's data",
        r"EventEnvelope\.model_validate": "EventEnvelope parsed by hand (kit.events.parse)",
        r"\.model_validate\([\w\[\]]+\.data\)": "an event's data validated by hand (kit.events.typed)",
        r"\b(event|e|loaded\[0\])\.data(\.get\(|\[)": "an event's data read as a dict",
    }
    found = []
    for path in (ROOT / "services").rglob("*.py"):
        text = path.read_text()
        for pattern, what in forbidden.items():
            for match in re.finditer(pattern, text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert not found, "\n".join(found)
