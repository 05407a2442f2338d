"""Typed events: every aggregate of the event log, declared once, with the model of its events' ``data``.

Commands and queries name themselves with ``@command``/``@query`` (:mod:`contracts.messages`);
events are declared per aggregate, next to the model of their data::

    MEMORY_AGGREGATE = aggregate("memory", MEMORY, MemoryState, MemoryEventType)

An aggregate's events carry its *new state* (:class:`contracts.envelope.EventEnvelope`), so every
event type of one aggregate has the same data model. The name is the wire name (the subject token
``<ns>.evt.<tenant>.<aggregate>.<id>`` and the envelope's ``aggregate``): it never changes once
published. ``kit.events`` parses an envelope's ``data`` into the registered model once, and a
consumer receives an :class:`Event` whose ``data`` is that model, never a dict.

An event whose type was not declared (a type of an older release, or one an import file named:
``restore_records`` appends the type it is given) is read with its aggregate's model all the same
(the data is the state, whatever the type); an event of an aggregate nobody declared is skipped by
``kit.events`` in one place.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar
from uuid import UUID

from pydantic import BaseModel

from contracts.envelope import EventEnvelope

S = TypeVar("S", bound=BaseModel)


@dataclass(frozen=True)
class AggregateSpec:
    """One aggregate of the event log: its wire name, the service that appends its events, the
    model of every event's ``data`` and the event types it declares."""

    name: str
    owner: str
    state: type[BaseModel]
    types: tuple[str, ...]


#: aggregate name -> spec, filled as contract modules are imported (``contracts.messages.load_all``).
AGGREGATES: dict[str, AggregateSpec] = {}


def aggregate(name: str, owner: str, state: type[BaseModel], types: Iterable[str]) -> str:
    """Declare an aggregate owned by ``owner`` (the only service that appends its events) whose
    events carry ``state`` as their data; returns ``name`` (the module's constant for it)."""
    spec = AggregateSpec(name=name, owner=owner, state=state, types=tuple(str(t) for t in types))
    known = AGGREGATES.get(name)
    if known is not None and known != spec:
        raise ValueError(f"aggregate {name!r} is declared twice")
    AGGREGATES[name] = spec
    return name


def aggregate_spec(name: str) -> AggregateSpec | None:
    return AGGREGATES.get(name)


def event_model(aggregate_name: str, event_type: str) -> type[BaseModel] | None:
    """The model of the ``data`` of an event of (aggregate, type); None for an undeclared aggregate.
    An undeclared type of a declared aggregate reads with the aggregate's model (see the module)."""
    spec = AGGREGATES.get(aggregate_name)
    return spec.state if spec is not None else None


def aggregates_of(owner: str) -> dict[str, AggregateSpec]:
    """Every aggregate whose events ``owner`` appends, by name."""
    return {name: spec for name, spec in AGGREGATES.items() if spec.owner == owner}


@dataclass(frozen=True, slots=True)
class Event(Generic[S]):
    """An event as a consumer sees it: the envelope, and its ``data`` parsed into the aggregate's
    registered model (built by ``kit.events``, which parses each event once)."""

    envelope: EventEnvelope
    data: S

    @property
    def event_id(self) -> UUID:
        return self.envelope.event_id

    @property
    def type(self) -> str:
        return self.envelope.type

    @property
    def version(self) -> int:
        return self.envelope.version

    @property
    def occurred_at(self) -> datetime:
        return self.envelope.occurred_at

    @property
    def tenant(self) -> str:
        return self.envelope.tenant

    @property
    def aggregate(self) -> str:
        return self.envelope.aggregate

    @property
    def aggregate_id(self) -> str:
        return self.envelope.aggregate_id

    @property
    def correlation_id(self) -> str:
        return self.envelope.correlation_id

    @property
    def causation_id(self) -> str:
        return self.envelope.causation_id

    @property
    def origin(self) -> str | None:
        return self.envelope.origin

    def __repr__(self) -> str:  # (the envelope's repr, with the typed data)
        return f"Event({self.aggregate}/{self.aggregate_id} {self.type}, data={self.data!r})"


__all__ = ["AGGREGATES", "AggregateSpec", "Event", "aggregate", "aggregate_spec", "aggregates_of", "event_model"]
