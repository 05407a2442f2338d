"""What a daily log saved again without some of its turns takes with it: the memories learnt only
from those turns.

A user who removes a turn from a day's log ("forget I told you my PIN") expects what was learnt from
it to go too. A memory's provenance names the log and keeps a digest of each turn it was learnt
from (:func:`contracts.daily_logs.turn_digest`: speaker and words, whatever the turn's index), and
every later saying of the same fact keeps its own. When the log is saved with new turns, a memory
is **unlearnt** — forgotten, its history kept — when every saying of it came from this log and none
of its turns is among the log's turns now.

Cautious by construction: a memory is left alone when any saying came from elsewhere (another log,
a save without provenance), when its provenance has no digests (learnt before they were kept),
when it changed since it was learnt other than by being said again (edited, pinned, flagged: a
person or agent has touched it), or when it was learnt before this log was last started anew (a log
deleted by retention and saved again on the same date is another log with the same id).
"""

from __future__ import annotations

from collections.abc import Set
from datetime import date, datetime
from uuid import UUID

from contracts.memory import MemoryState, MemoryStatus

__all__ = ["unlearnt", "unlearnt_reason"]


def unlearnt(state: MemoryState, log_id: UUID, log_created: datetime, kept: Set[str]) -> bool:
    """Whether ``state`` was learnt only from turns of log ``log_id`` that its turns now (``kept``:
    their digests) no longer hold (see the module)."""
    if state.status is not MemoryStatus.ACTIVE or state.created_at < log_created:
        return False
    if state.version != state.repeats or len(state.sources) != state.repeats - 1:
        return False  # changed other than by sayings, or sayings no longer all listed
    sayings = [state.provenance, *(source.provenance for source in state.sources)]
    for said in sayings:
        if said is None or said.log_id != log_id or not said.turn_digests:
            return False
        if any(digest in kept for digest in said.turn_digests):
            return False
    return True


def unlearnt_reason(log_date: date) -> str:
    """The reason a memory unlearnt this way is forgotten with (its history shows it)."""
    return f"learnt only from turns removed from the daily log of {log_date}"
