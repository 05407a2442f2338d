"""The purge of a user across the install: every service's purge command, and the streams.

Each service deletes its own rows (``contracts.portability.PURGE_COMMANDS``: memory, auth, the
extractor, and any service that adds its own there); no service reads another's schema. The
streams are purged here, by subject: the user's events (``<ns>.evt.<user>.>``, once before the
services run, so no projector brings a row back from an event still on its way, and once after,
for the events the purge itself announced), and any pending command or dead letter of theirs
(those subjects do not name the tenant, so each message's envelope is read). The commands are
sent as the operator (tenant ``admin``): their stored outcomes name neither the user nor their
content.
"""

from __future__ import annotations

import asyncio
import json
from uuid import uuid4

from contracts.errors import ErrorCode
from contracts.messages import spec_of
from contracts.portability import PURGE_COMMANDS, PurgeReport, PurgeResult, PurgeUser
from kit.bus import Bus
from kit.client import Client, ServiceFailure

ADMIN_TENANT = "admin"


async def purge_subject(bus: Bus, stream: str, subject: str) -> int:
    """Remove every message of ``subject`` (wildcards allowed) from ``stream``; how many."""
    request = json.dumps({"filter": subject}).encode()
    reply = await bus.nc.request(f"$JS.API.STREAM.PURGE.{stream}", request, timeout=30)
    body = json.loads(reply.data)
    if "error" in body:
        raise RuntimeError(f"purge of {subject} from {stream} failed: {body['error']}")
    return int(body.get("purged", 0))


def _names_user(data: bytes | None, user_id: str) -> bool:
    try:
        message = json.loads(data or b"")
    except ValueError:
        return user_id.encode() in (data or b"")
    if not isinstance(message, dict) or message.get("type") == "purge_user":
        return False  # (a purge queued for a service that is down is kept: it runs when the service is back)
    payload = message.get("payload")
    return message.get("tenant") == user_id or (isinstance(payload, dict) and payload.get("user_id") == user_id)


async def drop_messages_of(bus: Bus, stream: str, subject: str, user_id: str) -> int:
    """Delete the messages of ``stream`` under ``subject`` whose envelope is the user's (a
    pending command, a dead letter); how many."""
    from nats.js.errors import NotFoundError

    dropped, seq = 0, 1
    while True:
        try:
            raw = await bus.js.get_msg(stream, seq=seq, subject=subject, next=True)
        except NotFoundError:
            return dropped
        assert raw.seq is not None
        if _names_user(raw.data, user_id):
            try:
                await bus.js.delete_msg(stream, raw.seq)
                dropped += 1
            except NotFoundError:
                pass  # handled (a work queue removes it) meanwhile
        seq = int(raw.seq) + 1


async def purge_user(bus: Bus, user_id: str, *, timeout_s: float = 300.0) -> PurgeReport:
    """Remove everything of ``user_id``: idempotent (a second purge removes nothing)."""
    names = bus.names
    user_events = f"{names.namespace}.evt.{user_id}.>"
    events = await purge_subject(bus, names.events_stream, user_events)
    client = Client(bus, command_timeout_s=timeout_s)

    async def purge_in(command: type[PurgeUser]) -> PurgeResult:
        try:
            result: PurgeResult = await client.send(ADMIN_TENANT, command(user_id=user_id), key=f"purge-{uuid4().hex}")
        except ServiceFailure as exc:
            if exc.error.code is not ErrorCode.ACCEPTED:
                raise
            return PurgeResult(service=spec_of(command).service, queued=True)
        return result

    results = list(await asyncio.gather(*(purge_in(command) for command in PURGE_COMMANDS)))
    events += await purge_subject(bus, names.events_stream, user_events)
    commands = await drop_messages_of(bus, names.commands_stream, f"{names.namespace}.cmd.>", user_id)
    dead = await drop_messages_of(bus, names.dead_letter_stream, f"{names.namespace}.dlq.>", user_id)
    return PurgeReport(user_id=user_id, services=results, events=events, commands=commands, dead_letters=dead)
