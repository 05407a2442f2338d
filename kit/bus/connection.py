"""The bus's connection: one NATS connection with JetStream, bound to a namespace of names, and
the publish every role of the bus goes through (retried with tenacity)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Self

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from pydantic import BaseModel
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from contracts.subjects import ConsumerSpec, Names
from kit.pg import redact

__all__ = ["BusUnavailable", "Connection", "Handler", "dumps"]


class BusUnavailable(Exception):
    """No service answered: the reason says what to start or check."""


Handler = Callable[[Msg], Awaitable[None]]


def dumps(model: BaseModel) -> bytes:
    return model.model_dump_json().encode()


class Connection:
    """One NATS connection with JetStream, bound to a namespace of names."""

    def __init__(self, nc: NATS, names: Names) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.names = names
        #: the durable consumers this process runs (for the lag sampler, kit.metrics.sample_bus)
        self.consuming: dict[str, ConsumerSpec] = {}

    @classmethod
    async def connect(cls, url: str, names: Names, *, name: str = "engram") -> Self:
        """Connect, retrying for a while so services can start before NATS is up."""
        try:
            nc = await nats.connect(
                [u.strip() for u in url.split(",") if u.strip()],
                name=name,
                connect_timeout=3,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
            )
        except Exception as exc:  # nats raises several unrelated types here
            raise BusUnavailable(
                f"cannot connect to NATS at {redact(url)}: {exc}. Start NATS (`engram up` does) "
                "or set ENGRAM_NATS_URL to a running server with JetStream enabled."
            ) from exc
        return cls(nc, names)

    def too_large(self, what: str, size: int, headroom: int = 0) -> str | None:
        """Why a message of ``size`` bytes cannot be sent (over the server's ``max_payload``, less
        ``headroom``), or None when it can."""
        limit = self.nc.max_payload - headroom
        if not self.nc.max_payload or size <= limit:
            return None
        return f"{what} is {size:,} bytes and the bus carries at most {limit:,} a message"

    async def settle(self) -> None:
        """Return once the server has every subscription and message this connection has issued.

        ``nc.flush()`` alone does not promise that: nats-py (2.16) writes flush's PING straight to
        the socket, ahead of SUB and PUB commands still queued for its flusher task, so the PONG can
        come back before the server has them (a request from another connection then meets "no
        responders"). Our own PING round trip lets the flusher write the queue; the second PING
        goes out behind it, and its PONG means the server has read everything before it."""
        await self.nc.flush()
        await self.nc.flush()

    async def close(self) -> None:
        """Drain (what was subscribed finishes, what was published is sent), then close; with the
        server gone (reconnecting) there is nothing to drain to: just close."""
        if self.nc.is_closed:
            return
        try:
            await self.nc.drain()
        except nats.errors.Error:
            if not self.nc.is_closed:
                await self.nc.close()

    async def _publish(self, subject: str, data: bytes, headers: dict[str, str], stream: str) -> api.PubAck:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type((asyncio.TimeoutError, nats.errors.TimeoutError)),
            stop=stop_after_attempt(4),
            wait=wait_exponential(multiplier=0.1, max=2.0),
            reraise=True,
        ):
            with attempt:
                return await self.js.publish(subject, data, headers=dict(headers), stream=stream, timeout=5.0)
        raise AssertionError("unreachable")
