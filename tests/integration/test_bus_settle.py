"""``Connection.settle``: once it returns, the server holds every subscription the connection made,
so a request from another connection finds the responder at once (the race behind a "service not
alive" right after a service subscribed: nats-py writes flush's PING ahead of queued SUBs)."""

from __future__ import annotations

import uuid

import nats
import pytest

from contracts.subjects import Names
from kit.bus import Bus

pytestmark = pytest.mark.integration


class _Recorder:
    """Wraps the client's transport to record what it writes, in order."""

    def __init__(self, transport) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.written = transport, bytearray()

    def write(self, data: bytes) -> None:
        self.written += data
        self.inner.write(data)

    def writelines(self, lines) -> None:  # type: ignore[no-untyped-def]
        lines = list(lines)
        for line in lines:
            self.written += line
        self.inner.writelines(lines)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)


async def test_settle_puts_a_ping_behind_every_queued_subscription(infra) -> None:  # type: ignore[no-untyped-def]
    bus = await Bus.connect(infra.nats_url, Names(namespace=infra.fresh_namespace()), name="engram-test-settle")
    other = await nats.connect(infra.nats_url)
    try:
        recorder = _Recorder(bus.nc._transport)
        bus.nc._transport = recorder
        prefix = f"settle.{uuid.uuid4().hex}"

        async def echo(msg) -> None:  # type: ignore[no-untyped-def]
            await msg.respond(msg.data)

        for i in range(50):
            await bus.nc.subscribe(f"{prefix}.{i}", queue="q", cb=echo)
        await bus.settle()
        written = bytes(recorder.written)
        last_sub = written.rindex(f"SUB {prefix}.49".encode())
        assert written.rfind(b"PING\r\n") > last_sub, "settle returned on a PONG the server sent before our SUBs"
        for i in range(50):  # each subject has its responder on the server by now
            assert (await other.request(f"{prefix}.{i}", b"x", timeout=5)).data == b"x"
    finally:
        await other.close()
        await bus.close()
