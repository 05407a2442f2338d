"""The bus's event log: appends with optimistic concurrency on the aggregate's subject (a retried
event recognised by its id), and reads of an aggregate's events by direct get."""

from __future__ import annotations

from nats.js.errors import APIError, NotFoundError

from contracts.envelope import EventEnvelope
from contracts.subjects import HEADER_EXPECTED_LAST_SUBJECT_SEQ, HEADER_MSG_ID
from kit import tracing
from kit.bus.connection import Connection, dumps

__all__ = ["ConcurrencyConflict", "Events"]

WRONG_LAST_SEQUENCE = 10071
#: the message id of an event appended again because its first copy was purged within the
#: stream's duplicate window: the event id and this
REAPPENDED = ":appended-again"


class ConcurrencyConflict(Exception):
    """Another writer appended to the aggregate first (optimistic concurrency lost)."""


class Events(Connection):
    """Appends to and reads of the event stream."""

    async def append_event(self, subject: str, event: EventEnvelope, *, expected_last_seq: int | None) -> int:
        """Append ``event`` to the event stream; return its stream sequence.

        ``expected_last_seq`` is the aggregate subject's last sequence the writer saw (0 for a new
        aggregate); a different actual value raises ConcurrencyConflict. A retry of the same
        event (same ``event_id``) is recognised and returns the original sequence.
        """
        seq, _ = await self._append(subject, event, expected_last_seq)
        return seq

    async def append_event_once(
        self, subject: str, event: EventEnvelope, *, expected_last_seq: int | None,
    ) -> tuple[int, EventEnvelope]:
        """:meth:`append_event`, and the event as the log holds it: for a retry of an event already
        appended (same ``event_id``), the first attempt's — its timestamps, not the retry's — so
        that what a retried command projects and answers is what a replay of the log gives."""
        seq, stored = await self._append(subject, event, expected_last_seq)
        return seq, stored if stored is not None else event

    async def _append(
        self, subject: str, event: EventEnvelope, expected_last_seq: int | None,
    ) -> tuple[int, EventEnvelope | None]:
        """(sequence, the stored event if this was a retry of it, else None)."""
        headers = tracing.inject({HEADER_MSG_ID: str(event.event_id)})  # its consumers continue the trace
        if expected_last_seq is not None:
            headers[HEADER_EXPECTED_LAST_SUBJECT_SEQ] = str(expected_last_seq)
        for attempt in range(2):
            try:
                ack = await self._publish(subject, dumps(event), headers, self.names.events_stream)
            except APIError as exc:
                if exc.err_code != WRONG_LAST_SEQUENCE:
                    raise
                last = await self.last_event(subject)
                if last is not None and last[0].event_id == event.event_id:
                    return last[1], last[0]
                raise ConcurrencyConflict(f"{subject}: expected last sequence {expected_last_seq}") from exc
            if not ack.duplicate:
                return int(ack.seq), None
            try:  # the same event id within the stream's duplicate window: the first one's
                raw = await self.js.get_msg(self.names.events_stream, seq=int(ack.seq))
            except NotFoundError:
                # ... purged since (a user's purge removes their events; the window still knows the
                # id): the log does not hold this event, so it is appended once more under a second
                # message id, derived from the first, so that a retry of this append is recognised
                # as it is (purged twice within one window: the error stands)
                if attempt:
                    raise
                headers[HEADER_MSG_ID] = f"{event.event_id}{REAPPENDED}"
                continue
            assert raw.data is not None
            return int(ack.seq), EventEnvelope.model_validate_json(raw.data)
        raise AssertionError("unreachable")

    async def last_event(self, subject: str) -> tuple[EventEnvelope, int] | None:
        """The newest event on one aggregate subject (its current state), with its sequence."""
        try:
            raw = await self.js.get_last_msg(self.names.events_stream, subject)
        except NotFoundError:
            return None
        assert raw.data is not None and raw.seq is not None
        return EventEnvelope.model_validate_json(raw.data), int(raw.seq)

    async def history(self, subject: str) -> list[tuple[EventEnvelope, int]]:
        """Every event of one aggregate subject, oldest first (one direct read per event)."""
        out: list[tuple[EventEnvelope, int]] = []
        seq = 1
        while (found := await self._event_from(subject, seq)) is not None:
            out.append(found)
            seq = found[1] + 1
        return out

    async def first_event(self, subject: str) -> tuple[EventEnvelope, int] | None:
        """The oldest event on one aggregate subject (what created it), with its sequence."""
        return await self._event_from(subject, 1)

    async def _event_from(self, subject: str, seq: int) -> tuple[EventEnvelope, int] | None:
        """The first event of ``subject`` at or after stream sequence ``seq``."""
        try:
            raw = await self.js.get_msg(self.names.events_stream, seq=seq, subject=subject, next=True)
        except NotFoundError:
            return None
        assert raw.data is not None and raw.seq is not None
        return EventEnvelope.model_validate_json(raw.data), int(raw.seq)
