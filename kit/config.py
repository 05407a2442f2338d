"""Settings shared by every service: where the bus, the database and the data folder are.

Each service extends ``CommonSettings`` with its own prefix-free fields; every variable is read
from the environment with the ``ENGRAM_`` prefix. Defaults run the embedded stack.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from contracts.subjects import DEFAULT_NAMESPACE, Names

T = TypeVar("T")


def default_home() -> Path:
    return Path(os.environ.get("ENGRAM_HOME") or Path.home() / ".engram")


class CommonSettings(BaseSettings):
    """Connection settings every service needs."""

    model_config = SettingsConfigDict(env_prefix="ENGRAM_", extra="ignore", env_ignore_empty=True)

    env: str = Field("development", description="development | production")
    home: Path = Field(default_factory=default_home, description="data folder")
    nats_url: str = "nats://127.0.0.1:4222"
    database_url: str = "postgresql://postgres@127.0.0.1:5432/engram"
    namespace: str = DEFAULT_NAMESPACE
    stream_replicas: int = Field(1, ge=1, le=5)
    log_level: str = "INFO"
    stall_warning_ms: float = Field(
        250, ge=0, description="log a warning when the event loop was blocked this long (0: off)"
    )

    @property
    def names(self) -> Names:
        return Names(self.namespace)


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def run_service(main: Coroutine[Any, Any, T]) -> T:
    """Run a service's main coroutine on uvloop where it is installed (not on Windows): the event
    loop, and so asyncpg, nats-py and uvicorn, cost less CPU per message; else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
