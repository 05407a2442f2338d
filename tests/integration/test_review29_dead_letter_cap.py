"""Issue 29 L2: the dead-letter stream is capped (messages and bytes, oldest dropped first) as well
as aged, on a new install and on one whose stream was created before the cap (an update). Run
against the machine's nats-server (2.9) and the embedded one (2.15) alike."""

from __future__ import annotations

import pytest
from nats.js import api

from contracts.subjects import DEAD_LETTER_MAX_BYTES, DEAD_LETTER_MAX_MSGS, Names
from kit.bus import Bus

pytestmark = pytest.mark.integration


def capped(config: api.StreamConfig) -> None:
    assert config.max_msgs == DEAD_LETTER_MAX_MSGS
    assert config.max_bytes == DEAD_LETTER_MAX_BYTES
    assert config.max_age == 30 * 24 * 3600
    assert config.discard in (None, api.DiscardPolicy.OLD)


async def test_a_new_dead_letter_stream_is_capped(infra) -> None:  # type: ignore[no-untyped-def]
    names = Names(infra.fresh_namespace())
    bus = await Bus.connect(infra.nats_url, names, name="dlq-cap-test")
    try:
        await bus.ensure_streams()
        capped((await bus.js.stream_info(names.dead_letter_stream)).config)
        events = (await bus.js.stream_info(names.events_stream)).config
        assert events.max_msgs in (None, -1) and events.max_bytes in (None, -1)  # the event log is never capped
    finally:
        await bus.delete_streams()
        await bus.close()


async def test_a_dead_letter_stream_made_before_the_cap_gets_it_at_start(infra) -> None:  # type: ignore[no-untyped-def]
    names = Names(infra.fresh_namespace())
    bus = await Bus.connect(infra.nats_url, names, name="dlq-cap-test")
    try:
        await bus.js.add_stream(api.StreamConfig(name=names.dead_letter_stream, subjects=[f"{names.namespace}.dlq.>"],
                                                 storage=api.StorageType.FILE, max_age=30 * 24 * 3600.0))
        await bus.ensure_streams()
        capped((await bus.js.stream_info(names.dead_letter_stream)).config)
    finally:
        await bus.delete_streams()
        await bus.close()
