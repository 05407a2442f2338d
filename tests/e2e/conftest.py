"""A running Engram stack (every service as its own process) for end-to-end tests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from contracts.subjects import Names
from deploy.stack import Stack, StackOptions
from kit.bus import Bus


@dataclass
class Running:
    stack: Stack
    base_url: str
    mcp_url: str
    key: str
    user_id: str
    other_key: str
    other_user_id: str
    auth_url: str = ""
    username: str = "alice"
    password: str = "correct horse battery staple"


@pytest.fixture(scope="session")
def running(infra) -> Iterator[Running]:  # type: ignore[no-untyped-def]
    options = StackOptions(
        home=infra.root / "stack-home",
        nats_url=infra.nats_url,
        database_url=infra.database_url,
        namespace=infra.fresh_namespace(),
        gateway_port=0,
        auth_port=0,
        extra_env={"ENGRAM_LOG_LEVEL": "INFO", "ENGRAM_RATE_LIMIT_PER_MINUTE": "100000", "ENGRAM_RATE_LIMIT_BURST": "10000",
                   "ENGRAM_ANONYMOUS_RATE_LIMIT_PER_MINUTE": "100000"},
    )
    stack = Stack(options, say=lambda _: None)
    try:
        stack.start()
        alice = stack.create_key(None, "alice")
        bob = stack.create_key(None, "bob")
        running = Running(
            stack=stack, base_url=stack.gateway_url, mcp_url=stack.gateway_url + "/mcp",
            key=alice["key"], user_id=alice["view"]["user_id"],
            other_key=bob["key"], other_user_id=bob["view"]["user_id"], auth_url=stack.auth_url,
        )
        stack.create_user(running.username, running.password, user_id=running.user_id)  # alice signs in too
        yield running
    finally:
        stack.stop()
        asyncio.run(_drop_streams(infra.nats_url, options.namespace))  # the machine's NATS outlives the tests


async def _drop_streams(nats_url: str, namespace: str) -> None:
    bus = await Bus.connect(nats_url, Names(namespace), name="engram-test-cleanup")
    try:
        await bus.delete_streams()
    finally:
        await bus.close()
