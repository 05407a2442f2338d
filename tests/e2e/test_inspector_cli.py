"""The MCP Inspector CLI (npm @modelcontextprotocol/inspector, --cli) against the running stack."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

INSPECTOR = Path(__file__).resolve().parents[2] / "tools" / "inspector" / "node_modules" / ".bin" / "mcp-inspector"


def inspector(running, tmp_path: Path, *args: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    if not INSPECTOR.exists():
        if shutil.which("npm") is None:
            pytest.skip("Node.js/npm not installed: the MCP Inspector CLI cannot run here")
        pytest.fail(f"MCP Inspector not installed at {INSPECTOR}: run `npm install --prefix tools/inspector` (make test does)")
    proc = subprocess.run(
        [str(INSPECTOR), "--cli", running.mcp_url, "--transport", "http",
         "--header", f"Authorization: Bearer {running.key}", *args],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "MCP_CATALOG_PATH": str(tmp_path / "catalog.json")},
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return json.loads(proc.stdout)


def test_inspector_lists_tools(running, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    listing = inspector(running, tmp_path, "--method", "tools/list")
    assert {"memory", "recall", "whoAmI"} <= {t["name"] for t in listing["tools"]}


def test_inspector_saves_and_recalls(running, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inspector(running, tmp_path, "--method", "tools/call", "--tool-name", "memory",
              "--tool-arg", "content=My favourite mountain is Mont Blanc", "containerTag=inspector")
    result = inspector(running, tmp_path, "--method", "tools/call", "--tool-name", "recall",
                       "--tool-arg", "query=favourite mountain", "containerTag=inspector")
    text = "\n".join(c.get("text", "") for c in result["content"])
    assert "Mont Blanc" in text and not result.get("isError")
