"""Subjects, stream and consumer definitions of the Engram bus, as plain data.

Every name is derived from a *namespace* (default ``engram``) so that several Engram installs, or
test runs, can share one NATS server without seeing each other.

Subjects:
  events    ``<ns>.evt.<tenant>.<aggregate>.<id>``   (JetStream, the source of truth)
  commands  ``<ns>.cmd.<service>.<name>``            (JetStream work queue)
  queries   ``<ns>.qry.<service>.<name>``            (core NATS request-reply, queue groups)
  dead      ``<ns>.dlq.<stream>.<consumer>``         (JetStream, poison messages)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

DEFAULT_NAMESPACE = "engram"
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,128}$")

HEADER_MSG_ID = "Nats-Msg-Id"
HEADER_EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
HEADER_REPLY_TO = "Engram-Reply-To"
HEADER_ERROR = "Engram-Error"
HEADER_ORIGINAL_SUBJECT = "Engram-Original-Subject"
HEADER_ORIGINAL_SEQ = "Engram-Original-Sequence"


def subject_token(value: str, what: str) -> str:
    """Check that ``value`` can stand as one subject token (no dots, wildcards or spaces)."""
    if not _TOKEN.match(value):
        raise ValueError(f"{what} {value!r} is not a valid subject token: use 1-128 of [A-Za-z0-9_-]")
    return value


#: the dead-letter stream's caps: a flood of poison messages cannot fill the server's disk
DEAD_LETTER_MAX_MSGS = 100_000
DEAD_LETTER_MAX_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class StreamSpec:
    """A JetStream stream, declared as code and created idempotently at start-up."""

    name: str
    subjects: tuple[str, ...]
    retention: Literal["limits", "workqueue"]
    duplicate_window_s: float
    max_age_s: float = 0.0
    #: caps on what the stream holds (0: none); past one, the oldest messages are dropped first
    max_msgs: int = 0
    max_bytes: int = 0
    description: str = ""


@dataclass(frozen=True)
class ConsumerSpec:
    """A durable pull consumer with explicit ack, bounded redelivery and backoff."""

    stream: str
    durable: str
    filter_subject: str
    ack_wait_s: float = 30.0
    max_deliver: int = 5
    #: Delays before a failed message is tried again (sent with its NAK). Deliberately not the
    #: server's BackOff setting: that replaces the ack wait of every delivery, the first one
    #: included, so a batch held 0.5 s before its ack came back while it was being handled.
    backoff_s: tuple[float, ...] = field(default=(0.5, 2.0, 5.0, 15.0))
    max_ack_pending: int = 1000
    description: str = ""
    #: the server deletes the consumer after this long without a puller (None: never); for a
    #: consumer of one replica that may go away for good (it is created again when it comes back)
    inactive_threshold_s: float | None = None


@dataclass(frozen=True)
class Names:
    """All bus names of one namespace."""

    namespace: str = DEFAULT_NAMESPACE

    def __post_init__(self) -> None:
        subject_token(self.namespace, "namespace")

    # streams -----------------------------------------------------------------------------
    @property
    def events_stream(self) -> str:
        return f"{self.namespace.upper()}_EVENTS"

    @property
    def commands_stream(self) -> str:
        return f"{self.namespace.upper()}_COMMANDS"

    @property
    def dead_letter_stream(self) -> str:
        return f"{self.namespace.upper()}_DLQ"

    def streams(self) -> tuple[StreamSpec, ...]:
        ns = self.namespace
        return (
            StreamSpec(
                name=self.events_stream,
                subjects=(f"{ns}.evt.>",),
                retention="limits",
                duplicate_window_s=120.0,
                description="Engram event log: the source of truth, kept indefinitely",
            ),
            StreamSpec(
                name=self.commands_stream,
                subjects=(f"{ns}.cmd.>",),
                retention="workqueue",
                duplicate_window_s=600.0,
                max_age_s=7 * 24 * 3600.0,
                description="Engram commands: a work queue, deduplicated by idempotency key",
            ),
            StreamSpec(
                name=self.dead_letter_stream,
                subjects=(f"{ns}.dlq.>",),
                retention="limits",
                duplicate_window_s=120.0,
                max_age_s=30 * 24 * 3600.0,
                # bounded however many poison messages arrive (each at most a request body): the
                # oldest go first; the count and the sample of each consumer's last ones remain
                max_msgs=DEAD_LETTER_MAX_MSGS,
                max_bytes=DEAD_LETTER_MAX_BYTES,
                description="Messages that could not be handled, kept 30 days (at most 100,000 or 256 MiB, "
                "oldest dropped first) for inspection",
            ),
        )

    # subjects ----------------------------------------------------------------------------
    def event(self, tenant: str, aggregate: str, aggregate_id: str) -> str:
        subject_token(tenant, "tenant")
        subject_token(aggregate, "aggregate")
        subject_token(aggregate_id, "aggregate id")
        return f"{self.namespace}.evt.{tenant}.{aggregate}.{aggregate_id}"

    def events_of(self, aggregate: str, tenant: str = "*") -> str:
        return f"{self.namespace}.evt.{tenant}.{aggregate}.>"

    def command(self, service: str, name: str) -> str:
        return f"{self.namespace}.cmd.{service}.{name}"

    def commands_of(self, service: str) -> str:
        return f"{self.namespace}.cmd.{service}.>"

    def query(self, service: str, name: str) -> str:
        return f"{self.namespace}.qry.{service}.{name}"

    def dead_letter(self, stream: str, durable: str) -> str:
        return f"{self.namespace}.dlq.{stream}.{durable}"

    def broadcast(self, service: str, name: str) -> str:
        """A plain (not stored) message every replica of ``service`` hears, e.g. that a user was purged."""
        return f"{self.namespace}.bcast.{service}.{name}"

    # consumers ---------------------------------------------------------------------------
    def command_consumer(self, service: str) -> ConsumerSpec:
        return ConsumerSpec(
            stream=self.commands_stream,
            durable=f"{service}-commands",
            filter_subject=self.commands_of(service),
            description=f"{service} service: handles its commands",
        )

    def projector(self, service: str, aggregate: str, name: str = "projector") -> ConsumerSpec:
        return ConsumerSpec(
            stream=self.events_stream,
            durable=f"{service}-{name}",
            filter_subject=self.events_of(aggregate),
            description=f"{service} service: projects {aggregate} events into its read models",
        )


MEMORY = "memory"
AUTH = "auth"
GRAPH = "graph"
