"""Talking to a running Engram from the command line: where it runs, and admin commands over NATS."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any
from uuid import uuid4

from contracts.envelope import CommandEnvelope, QueryEnvelope, Reply
from contracts.subjects import AUTH, Names
from deploy.credentials import redact_url, write_private
from kit.bus import Bus, BusUnavailable
from kit.config import default_home

STACK_FILE = "stack.json"


@dataclass
class StackInfo:
    """What `engram up` started, written to ENGRAM_HOME/stack.json (mode 0600) for the other
    commands. The URLs carry the embedded servers' credentials."""

    nats_url: str
    database_url: str
    namespace: str
    gateway_url: str
    owner_user_id: str | None = None
    api_key_id: str | None = None  # the key `engram up` made (minted once per home)
    pids: dict[str, int] = field(default_factory=dict)
    embedded_nats: bool = False
    embedded_postgres: bool = False

    def save(self, home: Path) -> None:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(home / STACK_FILE, json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, home: Path) -> StackInfo | None:
        path = home / STACK_FILE
        if not path.exists():
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in json.loads(path.read_text()).items() if k in known})


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
    await _check_credentials(url)
    return await Bus.connect(url, Names(namespace), name="engram-cli")


async def _check_credentials(url: str) -> None:
    """Fail at once, saying what to do, when NATS refuses our credentials (the bus itself would
    retry for ever). Any other failure is left to the bus's own connect and message."""
    import nats
    from nats.errors import Error as NatsError

    async def quiet(_exc: Exception) -> None:
        return None

    try:
        nc = await nats.connect(
            [u.strip() for u in url.split(",") if u.strip()], name="engram-cli-probe", connect_timeout=3,
            allow_reconnect=False, max_reconnect_attempts=0, error_cb=quiet,
        )
    except NatsError as exc:
        if "authorization" in str(exc).lower() or "authentication" in str(exc).lower():
            raise BusUnavailable(
                f"NATS at {redact_url(url)} refused the credentials ({exc}). The NATS of `engram up` "
                "requires the user and password it keeps in $ENGRAM_HOME/credentials.json: run the "
                "command as the owner of that folder with ENGRAM_HOME set to it (and ENGRAM_NATS_URL "
                "unset), or put the credentials in the URL: nats://USER:PASSWORD@HOST:PORT."
            ) from exc
        return
    except Exception:  # unreachable, timeouts: the bus says it
        return
    await nc.close()
