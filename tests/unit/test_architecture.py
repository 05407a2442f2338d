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
