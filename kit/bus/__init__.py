"""The Engram bus on NATS JetStream: streams, events with optimistic concurrency, commands with
idempotency keys and replies, core-NATS queries, and durable pull consumers with explicit ack,
backoff, bounded redelivery and a dead-letter stream.

This package is plumbing shared by every service; it knows message shapes from ``contracts`` and
nothing of any service's domain. :class:`Bus` is one connection with every role; each role is a
module:

=========================  =====================================================================
``connection.py``          the connection (connect, close) and the retried publish
``streams.py``             streams and durable consumers, created as declared; their state
``event_log.py``           appends with optimistic concurrency; an aggregate's events read back
``commands.py``            send a command, await its outcome (reply, outcome query, queued)
``queries.py``             ask a service, answer for one (queue group, deadlines)
``consumers.py``           the pull consumer loop: ack, retry, dead letters, the batch pipeline
=========================  =====================================================================
"""

from __future__ import annotations

from kit.bus.commands import OUTCOME_QUERY, Commands, queued, reply_to, request_fingerprint
from kit.bus.connection import BusUnavailable, Handler, dumps
from kit.bus.consumers import Consumers, DeadHook, PoisonMessage
from kit.bus.event_log import ConcurrencyConflict, Events
from kit.bus.queries import HEADER_DEADLINE, validation_reply
from kit.bus.streams import ConsumerState

__all__ = [
    "HEADER_DEADLINE",
    "OUTCOME_QUERY",
    "Bus",
    "BusUnavailable",
    "ConcurrencyConflict",
    "ConsumerState",
    "DeadHook",
    "Handler",
    "PoisonMessage",
    "dumps",
    "queued",
    "reply_to",
    "request_fingerprint",
    "validation_reply",
]


class Bus(Events, Commands, Consumers):
    """One NATS connection with JetStream, bound to a namespace of names: the event log, commands,
    queries, streams and consumers over it."""
