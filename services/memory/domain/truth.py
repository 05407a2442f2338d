"""Memories that stay true: what a save does after the rules of :mod:`.supersession` have judged
the new memory against its nearest current ones. Pure transitions over ``MemoryState``; no I/O.

- :func:`plan` turns the rules' decisions into one plan: merge into a duplicate, or write the new
  memory superseding the stale ones (or itself superseded, when it was said before the candidate),
  flagging the uncertain ones;
- :func:`superseded`, :func:`merged`, :func:`settled`, :func:`pinned` are the states of the events
  that carry the plan out (``MemorySuperseded``, ``MemoryMerged``, ``MemoryConflictSettled``,
  ``MemoryPinned``);
- :func:`valid_at` says whether a memory stood at a moment (recall ``as_of``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, time
from uuid import UUID

from contracts.memory import (
    DecidedBy,
    MemorySource,
    MemoryState,
    MemoryStatus,
    MemoryView,
    Provenance,
    SaveMemory,
    Supersession,
)
from services.memory.domain.errors import Conflict
from services.memory.domain.keywords import STOPWORDS
from services.memory.domain.supersession import DEFAULT_THRESHOLDS, Candidate, Decision, Statement, Verdict

#: Current memories nearest to a new one that the rules judge it against.
CANDIDATES = 8
#: Candidates below this cosine similarity are not judged: the rules' own gate (below it a rule's
#: verdict would only be UNCERTAIN). "Seattle is home now" and "I live in Mexico City with my
#: partner" are this far apart and still a change.
MIN_SIMILARITY = DEFAULT_THRESHOLDS.rule_gate
#: A merged memory keeps at most this many sayings (the count, ``repeats``, goes on).
MAX_SOURCES = 100
#: Importance rises by one each time the number of sayings doubles (2, 4, 8, ...), at most to this.
MAX_MERGED_IMPORTANCE = 5
#: Flags kept on one memory (the most confident first).
MAX_FLAGS = 5


def said_at(provenance: Provenance | None, now: datetime) -> datetime:
    """When a new memory was said: the day of the log it was extracted from (noon UTC of that
    day, or now when that is earlier: a log of today), else now."""
    if provenance is None or provenance.log_date is None:
        return now
    return min(now, datetime.combine(provenance.log_date, time(12, 0), tzinfo=UTC))


def valid_from(memory: MemoryState | MemoryView) -> datetime:
    """Since when a memory stands: when it was said (its ``valid_from``), else when it was written."""
    return memory.valid_from or memory.created_at


def valid_at(memory: MemoryState | MemoryView, moment: datetime) -> bool:
    """Whether ``memory`` (as of this version) stood at ``moment``: said by then and not yet superseded."""
    return valid_from(memory) <= moment and (memory.valid_until is None or moment < memory.valid_until)


def superseded_then(memory: MemoryState | MemoryView, moment: datetime) -> bool:
    """Whether ``memory`` had been said and superseded by ``moment``."""
    return memory.valid_until is not None and memory.valid_until <= moment and valid_from(memory) <= moment


def earlier_version_may_stand(memory: MemoryState | MemoryView, moment: datetime) -> bool:
    """Whether ``memory``'s current version does not stand at ``moment`` only because its content
    changed since (a later version of a keyed fact, said after ``moment``): an earlier version, read
    from the event log, may have stood then."""
    return not valid_at(memory, moment) and memory.version > 1 and valid_from(memory) > moment


def version_at(versions: Sequence[MemoryState], moment: datetime) -> MemoryState | None:
    """The version of a memory (its states, oldest first) that stood at ``moment``: the last one
    said by then, if it was not yet superseded or forgotten then; None when none did."""
    then = [v for v in versions if valid_from(v) <= moment]
    if not then:
        return None
    chosen = then[-1]
    if chosen.status is MemoryStatus.FORGOTTEN or not valid_at(chosen, moment):
        return None
    return chosen


def new_content(previous: MemoryState, state: MemoryState, when: datetime) -> MemoryState:
    """A new version ``state`` of ``previous``: when its content changed, it stands from ``when``
    (the moment it was said), so recall as_of finds the earlier content before that."""
    if state.content == previous.content:
        return state
    return state.model_copy(update={"valid_from": when})


_THE_USER = re.compile(r"\bthe user\b", re.IGNORECASE)
_THIRD_PERSON = (
    (re.compile(r"\bthe user and others\b", re.IGNORECASE), "we"),  # the extractor's "we"
    (re.compile(r"\bthe user's\b", re.IGNORECASE), "my"),
    (re.compile(r"\bthe user (?:is|was)\b", re.IGNORECASE), "I am"),
    (re.compile(r"\bthe user has\b", re.IGNORECASE), "I have"),
    (re.compile(r"\bthe user (?:does not|doesn't)\b", re.IGNORECASE), "I do not"),
    (re.compile(r"\bthe user (?:no longer|now|still|also|just|recently|finally|currently|usually|often|always|sometimes|"
                r"normally|generally|typically|regularly|never) (\w+)", re.IGNORECASE), None),
    (re.compile(r"\bthe user (\w+)", re.IGNORECASE), None),
    (re.compile(r"\btheir\b", re.IGNORECASE), "my"),
)


_IRREGULAR = {"has": "have", "is": "am", "does": "do", "goes": "go", "was": "was"}


def _verb(word: str) -> str:
    """A third-person verb in the first person: lives → live, studies → study, watches → watch."""
    low = word.casefold()
    if low in _IRREGULAR:
        return _IRREGULAR[low]
    if low.endswith("ies") and len(low) > 4:
        return word[:-3] + "y"
    if low.endswith(("ches", "shes", "sses", "xes", "oes")):
        return word[:-2]
    if low.endswith("s") and not low.endswith("ss") and len(low) > 3:
        return word[:-1]
    return word


def first_person(text: str) -> str:
    """A memory the extractor wrote about "the user" ("The user lives in Oslo with their partner.")
    as the user would say it ("I live in Oslo with my partner."), so the rules, which read what people
    say of themselves, read extracted memories too."""
    if not _THE_USER.search(text):
        return text
    for pattern, replacement in _THIRD_PERSON:
        if replacement is not None:
            text = pattern.sub(replacement, text)
            continue
        def verb(m: re.Match[str]) -> str:
            whole = m.group(0)
            head = whole[: m.start(1) - m.start(0)]
            return re.sub(r"(?i)\bthe user\b", "I", head) + _verb(m.group(1))
        text = pattern.sub(verb, text)
    return text


def statement(cmd: SaveMemory | MemoryState, when: datetime) -> Statement:
    """The rules' reading of a new content (a save's, or an update's: the memory with its new content)."""
    return Statement(content=first_person(cmd.content), created_at=when, category=cmd.category.value if cmd.category else None,
                     memory_key=cmd.memory_key, project=cmd.project)


def candidate(view: MemoryView, similarity: float) -> Candidate:
    return Candidate(content=first_person(view.content), created_at=valid_from(view),
                     category=view.category.value if view.category else None, memory_key=view.memory_key,
                     project=view.project, similarity=similarity, ref=view.id)


@dataclass(frozen=True)
class Plan:
    """What a save does with the rules' decisions."""

    merge_into: Decision | None = None  # the duplicate to merge into (nothing new is written)
    supersede: tuple[Decision, ...] = ()  # the current memories the new one supersedes
    superseded_by: Decision | None = None  # the newer memory that supersedes the new one (said earlier)
    flags: tuple[Decision, ...] = field(default=())  # uncertain: flagged, never resolved here

    @property
    def quiet(self) -> bool:
        return not (self.merge_into or self.supersede or self.superseded_by or self.flags)


def plan(decisions: Sequence[Decision]) -> Plan:
    """One plan from the rules' decisions (most similar first): the most confident duplicate wins
    (a merge writes nothing new, so nothing else happens); else every stale candidate is superseded,
    the newest candidate that supersedes the new one marks it, the uncertain ones are flagged."""
    duplicates = [d for d in decisions if d.verdict is Verdict.DUPLICATE]
    if duplicates:
        return Plan(merge_into=max(duplicates, key=lambda d: (d.confidence, d.candidate.similarity)))
    supersede = tuple(d for d in decisions if d.new_supersedes)
    newer = [d for d in decisions if d.verdict is Verdict.SUPERSEDES and d.stale == "new"]
    superseded_by = max(newer, key=lambda d: d.candidate.created_at) if newer else None
    flags = tuple(sorted((d for d in decisions if d.verdict is Verdict.UNCERTAIN),
                         key=lambda d: -d.confidence)[:MAX_FLAGS])
    return Plan(supersede=supersede, superseded_by=superseded_by, flags=flags)


def note(decision: Decision, memory_id: UUID) -> Supersession:
    return Supersession(memory_id=memory_id, reason=decision.reason[:500], confidence=round(decision.confidence, 3),
                        decided_by=DecidedBy(decision.decided_by))


def with_plan(state: MemoryState, p: Plan, when: datetime) -> MemoryState:
    """The new memory's first state under plan ``p``: when it was said, what it supersedes, what it
    is flagged against, and, said before a newer memory that changed it, superseded from the start."""
    update: dict[str, object] = {}
    if when != state.created_at:
        update["valid_from"] = when
    if p.supersede:
        update["supersedes"] = [note(d, _ref(d)) for d in p.supersede]
    if p.flags:
        update["conflicts"] = [note(d, _ref(d)) for d in p.flags]
    if p.superseded_by is not None:
        newer = p.superseded_by
        update.update(status=MemoryStatus.SUPERSEDED, valid_until=newer.candidate.created_at,
                      superseded_by=note(newer, _ref(newer)))
    return state.model_copy(update=update) if update else state


def superseded(old: MemoryState, by: UUID, at: datetime, why: Supersession, now: datetime) -> MemoryState | None:
    """``old`` superseded by memory ``by`` said at ``at``; None when it already is (a retry) or it is
    no longer current (forgotten, or superseded by another since)."""
    if old.status is not MemoryStatus.ACTIVE:
        return None
    return old.model_copy(update={
        "status": MemoryStatus.SUPERSEDED, "valid_until": max(at, valid_from(old)),
        "superseded_by": why.model_copy(update={"memory_id": by}),
        "version": old.version + 1, "updated_at": now,
    })


def superseded_now_by(old: MemoryState | MemoryView, memory_id: UUID) -> bool:
    """Whether ``old`` stands superseded by memory ``memory_id``."""
    return old.status is MemoryStatus.SUPERSEDED and old.superseded_by is not None \
        and old.superseded_by.memory_id == memory_id


def reinstated(old: MemoryState, gone: MemoryState, now: datetime) -> MemoryState | None:
    """``old`` once ``gone``, the memory that superseded it, was forgotten: a fact is hidden only by
    the statement that changed it, so when that statement is withdrawn, ``old`` is current again
    (from when it was said; nothing stood in its place). None when ``old`` is not superseded by
    ``gone`` (a retry, or superseded by another since), or when ``gone`` had itself been superseded
    before it was forgotten: what superseded that is current and says later what ``gone`` said."""
    if not superseded_now_by(old, gone.id) or gone.superseded_by is not None:
        return None
    return old.model_copy(update={
        "status": MemoryStatus.ACTIVE, "valid_until": None, "superseded_by": None,
        "version": old.version + 1, "updated_at": now,
    })


def content_words(text: str) -> int:
    return sum(1 for w in re.findall(r"\w+", text.casefold()) if w not in STOPWORDS)


def merged(existing: MemoryState, cmd: SaveMemory, when: datetime, now: datetime) -> MemoryState:
    """``existing`` having heard the same fact again (``cmd``, said at ``when``): one more saying
    among its sources, ``repeats`` + 1, importance up by one each time the sayings double, and the
    content of whichever of the two says more (so nothing either said is lost)."""
    said = " ".join(cmd.content.split())
    longer = content_words(said) > content_words(existing.content)
    source = MemorySource(said_at=when, source=cmd.source, provenance=cmd.provenance,
                          content=None if said == existing.content else (existing.content if longer else said))
    repeats = existing.repeats + 1
    raised = 1 if math.log2(repeats).is_integer() else 0
    update: dict[str, object] = {
        "repeats": repeats, "sources": [*existing.sources, source][-MAX_SOURCES:],
        "importance": min(MAX_MERGED_IMPORTANCE, max(existing.importance, cmd.importance) + raised),
        "version": existing.version + 1, "updated_at": now,
    }
    if longer:
        update["content"] = said
    return existing.model_copy(update=update)


def sayings(state: MemoryState) -> list[MemorySource]:
    """Every saying of ``state``'s fact: its own (when it was said, its source and provenance), then
    the ones merged into it."""
    own = MemorySource(said_at=valid_from(state), source=state.source, provenance=state.provenance)
    return [own, *state.sources]


def absorbed(into: MemoryState, other: MemoryState, now: datetime) -> MemoryState | None:
    """``into`` having taken ``other`` (another memory of the same fact, merged into it) as sayings:
    the sayings merged into ``other`` before, then its own (its words when they differ, when and
    where it was said: last, so undoing this merge gives back that one), ``repeats`` the sum of both,
    the higher importance; ``into``'s words stay. What ``other`` superseded and was flagged against
    goes with its statement: ``into`` names them too (those it does not name already, never itself).
    None when its own saying is among ``into``'s already (a retry)."""
    own = MemorySource(said_at=valid_from(other), source=other.source, provenance=other.provenance,
                       content=None if other.content == into.content else other.content)
    if own in into.sources:
        return None
    named = {into.id} | {w.memory_id for w in into.supersedes}
    supersedes = [*into.supersedes, *(w for w in other.supersedes if w.memory_id not in named)]
    named |= {w.memory_id for w in supersedes} | {c.memory_id for c in into.conflicts}
    conflicts = [*(c for c in into.conflicts if c.memory_id != other.id),  # (a flag between the two: one fact)
                 *(c for c in other.conflicts if c.memory_id not in named)]
    return into.model_copy(update={
        "repeats": into.repeats + other.repeats, "sources": [*into.sources, *other.sources, own][-MAX_SOURCES:],
        "importance": max(into.importance, other.importance), "version": into.version + 1, "updated_at": now,
        "supersedes": supersedes, "conflicts": conflicts,
    })


def repointed(old: MemoryState, gone: UUID, to: UUID, now: datetime) -> MemoryState | None:
    """``old``, superseded by memory ``gone``, now superseded by ``to`` (``gone`` was merged into it:
    the statement that changed ``old`` lives on there), with the same reason. None when ``old`` is
    not superseded by ``gone`` (a retry, or changed since)."""
    if not superseded_now_by(old, gone) or old.superseded_by is None:
        return None
    return old.model_copy(update={"superseded_by": old.superseded_by.model_copy(update={"memory_id": to}),
                                  "version": old.version + 1, "updated_at": now})


def unmerged(before: MemoryState, merge: MemoryState, current: MemoryState, split_id: UUID,
             now: datetime) -> tuple[MemoryState, MemoryState] | None:
    """A merge undone: ``merge`` is the version a ``MemoryMerged`` wrote, ``before`` the one before it,
    ``current`` the memory now. The saying that merge added leaves ``current`` (one saying fewer; the
    content and importance it changed go back unless changed since) and becomes the memory
    ``split_id`` in its own words, said when it was said. None when the saying is no longer among
    ``current``'s sources (undone already)."""
    if not merge.sources or merge.sources[-1] not in current.sources:
        return None
    saying = merge.sources[-1]
    took_words = merge.content != before.content
    words = merge.content if took_words else (saying.content or before.content)
    sources = list(current.sources)
    sources.remove(saying)
    update: dict[str, object] = {"sources": sources, "repeats": max(1, current.repeats - 1),
                                 "version": current.version + 1, "updated_at": now}
    if took_words and current.content == merge.content:
        update["content"] = before.content
    if merge.importance > before.importance and current.importance == merge.importance:
        update["importance"] = before.importance
    split = MemoryState(
        id=split_id, tenant=current.tenant, project=current.project, content=words, category=before.category,
        importance=before.importance, confidence=before.confidence, source=saying.source, version=1,
        status=MemoryStatus.ACTIVE, created_at=now, updated_at=now, provenance=saying.provenance,
        valid_from=saying.said_at,
    )
    return current.model_copy(update=update), split


def already_merged(existing: MemoryState, cmd: SaveMemory) -> bool:
    """Whether this saying (the same log and turns) is already among the memory's own or merged ones."""
    if cmd.provenance is None:
        return False
    seen = [existing.provenance, *(s.provenance for s in existing.sources)]
    return any(p is not None and p.log_id == cmd.provenance.log_id and p.turns == cmd.provenance.turns for p in seen)


def settled(state: MemoryState, other: UUID, now: datetime) -> MemoryState:
    """``state`` with its flag against ``other`` removed."""
    if not any(c.memory_id == other for c in state.conflicts):
        raise Conflict(f"memory {state.id} has no open conflict with {other}", "other_id")
    return state.model_copy(update={
        "conflicts": [c for c in state.conflicts if c.memory_id != other],
        "version": state.version + 1, "updated_at": now,
    })


def pinned(state: MemoryState, pin: bool | None, forget_after: datetime | None, clear_expiry: bool,
           now: datetime) -> MemoryState | None:
    """``state`` pinned/unpinned and with an expiry set or cleared; None when nothing changes."""
    update: dict[str, object] = {}
    if pin is not None and pin != state.pinned:
        update["pinned"] = pin
    if clear_expiry and state.forget_after is not None:
        update["forget_after"] = None
    elif forget_after is not None and forget_after != state.forget_after:
        update["forget_after"] = forget_after
    if not update:
        return None
    return state.model_copy(update={**update, "version": state.version + 1, "updated_at": now})


def _ref(d: Decision) -> UUID:
    ref = d.candidate.ref
    assert isinstance(ref, UUID), "candidates carry their memory's id"
    return ref
