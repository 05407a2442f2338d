"""One write path for an event-sourced aggregate, the same for every command that changes one:

    load the aggregate's last event → decide (pure) → append at the version loaded →
    project the event inline, recording the command's outcome in the projection's transaction

with the retry on a lost race inside it (another writer appended first: load again, decide again,
up to :data:`MAX_RACES` times). A handler gives the aggregate's subject and its ``decide`` step — a
pure function of the last event, returning a :class:`Write` (an event, and how the reply reads the
event as the log holds it) or an :class:`Answer` (nothing to write) — and gets the reply back.

The outcome is recorded with the effect, in one transaction, and the call notes it
(:meth:`kit.service.CommandCall.kept`), so kit's runtime does not record it a second time: no
handler says so by hand. A retried command's event, if its first attempt appended it, comes back as
the log holds it (``append_event_once``), so the reply and the projection are the first attempt's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel

from contracts.envelope import EventEnvelope
from contracts.events import Event
from kit.bus.event_log import ConcurrencyConflict
from kit.command_log import OutcomeRecord
from kit.service import CommandCall

__all__ = ["MAX_RACES", "Answer", "Decide", "Loaded", "Write", "WritePath"]

#: Optimistic-concurrency retries of one write before the command gives up ("retry").
MAX_RACES = 8

R = TypeVar("R")
#: an aggregate's last event with its stream sequence, or None: no event yet
Loaded = tuple[Event[Any], int] | None


@dataclass(frozen=True)
class Write(Generic[R]):
    """Append ``event``; the command answers ``reply(the event as the log holds it)``. ``before``:
    events appended first, in order (a restore's earlier versions); ``event``, the last, is projected."""

    event: EventEnvelope
    reply: Callable[[Event[Any]], R]
    before: tuple[EventEnvelope, ...] = ()


@dataclass(frozen=True)
class Answer(Generic[R]):
    """Nothing to append: the command answers ``reply``. ``project``: an event already in the log
    (another writer's) to project before answering, so that the caller reads it at once."""

    reply: R
    project: tuple[Event[Any], int] | None = None


#: the decide step: the last event (None: a new aggregate) → what to do; it may raise a
#: ``ServiceError`` (not found, …); None: this aggregate is not the command's (:meth:`WritePath.write`)
Decide = Callable[[Loaded], "Write[R] | Answer[R] | None"]
#: the inline projection of one event: (event, sequence, outcome to record in its transaction)
Project = Callable[[Event[Any], int, "OutcomeRecord | None"], Awaitable[Any]]


class EventStore(Protocol):
    async def append_event_once(
        self, subject: str, event: EventEnvelope, *, expected_last_seq: int | None,
    ) -> tuple[int, Event[Any]]: ...

    async def last_event(self, subject: str) -> tuple[Event[Any], int] | None: ...


def _no_mark(_: EventEnvelope | Event[Any]) -> AbstractAsyncContextManager[None]:
    return nullcontext()


class WritePath:
    """The write path of one service's aggregates: its event log, its inline projection, and
    ``inline(event)``, a context held from before the append until the projection committed (the
    service's projector consumer waits for it rather than project the same event a second time)."""

    def __init__(self, events: EventStore, project: Project,
                 inline: Callable[[EventEnvelope | Event[Any]], AbstractAsyncContextManager[Any]] = _no_mark) -> None:
        self.events = events
        self.project = project
        self.inline = inline

    async def write(
        self, call: CommandCall, subject: str, decide: Decide[R], *, outcome: bool = True,
        loaded: Loaded | Literal["load"] = "load", attempts: int = MAX_RACES, what: str | None = None,
    ) -> R | None:
        """Run ``decide`` on the aggregate of ``subject`` and carry it out; the reply.

        ``outcome``: the reply is the command's result, recorded in the projection's transaction
        (False for one aggregate of a command that writes several: kit's runtime records the
        command's result after it). ``loaded``: what the caller already read of the aggregate (None:
        a new aggregate expected), decided on without loading it again; a lost race loads it.
        ``attempts``: 1 when a lost race must reach the caller (ConcurrencyConflict), because what it
        decided before calling (e.g. on the aggregate's first event) may no longer hold. ``decide``
        returning None means the aggregate is not this command's: ``write`` returns None and the
        caller chooses another (a content's next identity)."""
        if loaded == "load":
            loaded = await self.events.last_event(subject)
        for attempt in range(1, attempts + 1):
            decided = decide(loaded)
            if decided is None:
                return None
            if isinstance(decided, Answer):
                if decided.project is not None:
                    event, seq = decided.project
                    async with self.inline(event):
                        await self.project(event, seq, None)
                return decided.reply
            async with self.inline(decided.event):
                expected = loaded[1] if loaded is not None else 0
                try:
                    for earlier in decided.before:
                        expected, _ = await self.events.append_event_once(subject, earlier, expected_last_seq=expected)
                    seq, stored = await self.events.append_event_once(subject, decided.event,
                                                                      expected_last_seq=expected)
                except ConcurrencyConflict:
                    stored = None
                if stored is not None:
                    reply = decided.reply(stored)
                    kept = call.outcome(reply) if outcome and isinstance(reply, BaseModel) else None
                    await self.project(stored, seq, kept)
                    if kept is not None:
                        call.kept(kept)
                    return reply
            if attempt < attempts:
                loaded = await self.events.last_event(subject)
        raise ConcurrencyConflict(f"{what or subject} kept changing while being written; retry")
