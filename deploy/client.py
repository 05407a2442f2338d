"""Talking to a running Engram from the command line: where it runs, and admin commands over NATS."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from uuid import uuid4

from contracts.envelope import CommandEnvelope, QueryEnvelope, Reply
from contracts.subjects import AUTH, Names
from kit.bus import Bus
from kit.config import default_home

STACK_FILE = "stack.json"


@dataclass
class StackInfo:
    """What `engram up` started, written to ENGRAM_HOME/stack.json for the other commands."""

    nats_url: str
    database_url: str
    namespace: str
    gateway_url: str
    owner_user_id: str | None = None
    pids: dict[str, int] = field(default_factory=dict)
    embedded_nats: bool = False
    embedded_postgres: bool = False

    def save(self, home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        path = home / STACK_FILE
        path.write_text(json.dumps(asdict(self), indent=2))
        path.chmod(0o600)

    @classmethod
    def load(cls, home: Path) -> StackInfo | None:
        path = home / STACK_FILE
        if not path.exists():
            return None
        return cls(**json.loads(path.read_text()))


def resolve_bus_target(home: Path | None = None) -> tuple[str, str]:
    """NATS URL and namespace: the environment wins, then the running stack, then the defaults."""
    home = home or default_home()
    stack = StackInfo.load(home)
    url = os.environ.get("ENGRAM_NATS_URL") or (stack.nats_url if stack else "nats://127.0.0.1:4222")
    namespace = os.environ.get("ENGRAM_NAMESPACE") or (stack.namespace if stack else "engram")
    return url, namespace


async def admin_command(bus: Bus, name: str, payload: dict[str, Any], timeout: float = 20.0) -> Reply[Any]:
    env = CommandEnvelope(command_id=f"cli-{uuid4().hex}", type=name, tenant="admin", payload=payload)
    return await bus.send_command(AUTH, name, env, timeout=timeout)


async def admin_query(bus: Bus, name: str, payload: dict[str, Any]) -> Reply[Any]:
    return await bus.query(AUTH, name, QueryEnvelope(type=name, tenant="admin", payload=payload))


async def connect(home: Path | None = None) -> Bus:
    url, namespace = resolve_bus_target(home)
    return await Bus.connect(url, Names(namespace), name="engram-cli")
