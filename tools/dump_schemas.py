"""Dump the gateway's public schemas, to diff them before and after a change.

Builds the gateway in-process (no bus, no database: nothing is called) and writes, as sorted JSON
into FOLDER: ``openapi.json`` (the REST API's OpenAPI document) and one file per MCP server
(``mcp-<toolsets>[-pinned].json``: every tool's name, title, description, inputSchema and
annotations, as ``tools/list`` answers them). Compare two dumps with ``diff -r``.

    .venv/bin/python tools/dump_schemas.py /tmp/schemas-before
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

from services.gateway.config import GatewaySettings
from services.gateway.main import LazyClient, LazyVerifier, McpServers, create_app
from services.gateway.operations import Operations


def _write(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


async def _tools(server: MCPServer) -> list[dict[str, Any]]:
    tools = await MCPServer.list_tools(server)  # the SDK's own answer, without the caller's projects
    return sorted((t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools),
                  key=lambda t: t["name"])


def dump(folder: Path) -> list[Path]:
    """Write the dump into ``folder``; the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    settings = GatewaySettings(public_url="http://testserver")
    written = [folder / "openapi.json"]
    _write(written[0], create_app(settings).openapi())
    servers = McpServers(Operations(LazyClient()), LazyVerifier(), settings)  # type: ignore[arg-type]
    for (pinned, sets), server in servers.servers.items():
        path = folder / f"mcp-{'+'.join(sorted(sets))}{'-pinned' if pinned else ''}.json"
        _write(path, asyncio.run(_tools(server)))
        written.append(path)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for p in dump(Path(sys.argv[1])):
        print(p)
