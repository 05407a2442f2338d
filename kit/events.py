"""Typed events: every event is parsed here, once, into the model its aggregate declares
(``contracts.events``), and consumers receive a :class:`contracts.events.Event` whose ``data`` is
that model — never a dict, never ``json.loads`` of a message in a service.

* :func:`typed` / :func:`parse`: one envelope (or one message's bytes) → ``Event``. Data that does
  not fit its model raises ``pydantic.ValidationError`` — in a consumer the bus dead-letters it, as
  it always did when a projection validated the data itself.
* An event of an aggregate no contract declares raises :class:`UnknownEvent`; the helpers that
  consumers, projectors and replays use (:func:`known`, :func:`parse_known`, :func:`history`) skip
  it with one warning per aggregate — the one place such an event is handled (before typed events,
  an aggregate no projection routed was skipped the same way).
* :class:`TypedEventLog`: the event log of one service's own aggregates (load, history, append),
  handing back typed events.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Protocol

from contracts.envelope import EventEnvelope
from contracts.events import Event, event_model
from contracts.messages import load_all

log = logging.getLogger("engram.events")

_warned: set[str] = set()


class UnknownEvent(Exception):
    """An event of an aggregate that no contract declares."""


def typed(envelope: EventEnvelope | Event[Any]) -> Event[Any]:
    """The event with its ``data`` parsed into its aggregate's model (an ``Event`` as it is)."""
    if isinstance(envelope, Event):
        return envelope
    model = event_model(envelope.aggregate, envelope.type)
    if model is None:
        load_all()  # (a process that has not imported every contract module yet)
        model = event_model(envelope.aggregate, envelope.type)
        if model is None:
            raise UnknownEvent(f"no contract declares the aggregate {envelope.aggregate!r} "
                               f"(event {envelope.type} {envelope.event_id})")
    return Event(envelope=envelope, data=model.model_validate(envelope.data))


def parse(raw: bytes) -> Event[Any]:
    """One message of the event stream, parsed once: envelope and data."""
    return typed(EventEnvelope.model_validate_json(raw))


def skipped(exc: UnknownEvent, aggregate: str) -> None:
    """Note an event nobody declares (once per aggregate and process): it is skipped."""
    if aggregate not in _warned:
        _warned.add(aggregate)
        log.warning("%s: skipped (and every further event of that aggregate)", exc)


def parse_known(raw: bytes) -> Event[Any] | None:
    """:func:`parse`, or None (logged) for an event of an undeclared aggregate."""
    envelope = EventEnvelope.model_validate_json(raw)
    try:
        return typed(envelope)
    except UnknownEvent as exc:
        skipped(exc, envelope.aggregate)
        return None


def known(events: Iterable[tuple[EventEnvelope | Event[Any], int]]) -> list[tuple[Event[Any], int]]:
    """Typed events with their stream sequences; an event of an undeclared aggregate is skipped."""
    out: list[tuple[Event[Any], int]] = []
    for envelope, seq in events:
        try:
            out.append((typed(envelope), seq))
        except UnknownEvent as exc:
            skipped(exc, envelope.aggregate)
    return out


class EventReader(Protocol):
    async def last_event(self, subject: str) -> tuple[EventEnvelope, int] | None: ...

    async def history(self, subject: str) -> list[tuple[EventEnvelope, int]]: ...

    async def first_event(self, subject: str) -> tuple[EventEnvelope, int] | None: ...


class EventWriter(EventReader, Protocol):
    async def append_event(self, subject: str, event: EventEnvelope, *, expected_last_seq: int | None) -> int: ...

    async def append_event_once(
        self, subject: str, event: EventEnvelope, *, expected_last_seq: int | None,
    ) -> tuple[int, EventEnvelope]: ...


async def history(log: EventReader, subject: str) -> list[tuple[Event[Any], int]]:
    """Every event of ``subject`` (one aggregate, or a wildcard such as ``Names.events_of``),
    oldest first, typed; events of undeclared aggregates skipped."""
    return known(await log.history(subject))


class TypedEventLog:
    """The event log of a service's own aggregates (``kit.bus.Bus`` underneath), handing back
    typed events: what a writer loads to decide, and what it appended to project it inline."""

    def __init__(self, log: EventWriter) -> None:
        self.log = log

    async def append_event(self, subject: str, event: EventEnvelope, *, expected_last_seq: int | None) -> int:
        return await self.log.append_event(subject, event, expected_last_seq=expected_last_seq)

    async def append_event_once(
        self, subject: str, event: EventEnvelope, *, expected_last_seq: int | None,
    ) -> tuple[int, Event[Any]]:
        """The sequence, and the event as the log holds it (a retry's first attempt's), typed."""
        seq, stored = await self.log.append_event_once(subject, event, expected_last_seq=expected_last_seq)
        return seq, typed(stored)

    async def last_event(self, subject: str) -> tuple[Event[Any], int] | None:
        found = await self.log.last_event(subject)
        return (typed(found[0]), found[1]) if found is not None else None

    async def first_event(self, subject: str) -> tuple[Event[Any], int] | None:
        found = await self.log.first_event(subject)
        return (typed(found[0]), found[1]) if found is not None else None

    async def history(self, subject: str) -> list[tuple[Event[Any], int]]:
        return await history(self.log, subject)


__all__ = ["Event", "TypedEventLog", "UnknownEvent", "history", "known", "parse", "parse_known", "typed"]
