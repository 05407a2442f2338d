"""Memory service contracts: commands, events, queries and their results."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Literal, TypeVar
from uuid import UUID

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from contracts.events import aggregate
from contracts.messages import command, messages_of, query
from contracts.subjects import MEMORY

PROJECT_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
DEFAULT_PROJECT = "default"
MAX_CONTENT_CHARS = 200_000
MAX_QUERY_CHARS = 10_000
MAX_RECALL_LIMIT = 100
MAX_KEYWORD_CHARS = 200
MAX_STRUCTURED_CONTENT_CHARS = 4_000
MAX_CONTEXT_CHARS = 2_000
MEMORY_KEY_PATTERN = r"^[a-z]+\.[a-z0-9_]{1,64}$"
TOPIC_PATTERN = r"^[a-z0-9_]{1,64}$"
# Text that is stored or searched in Postgres, which cannot hold NUL: refused at the door (a NUL
# saved would fail its projection on every retry; one searched for, the query).
TEXT_PATTERN = r"^[^\x00]*$"

_CONTEXT_DESCRIPTION = (
    "where the memory came from, e.g. the message it answers; helps recall find it "
    "(indexed at a lower weight), never part of its content"
)

Project = Field(DEFAULT_PROJECT, pattern=PROJECT_PATTERN, description="project tag: 1-128 of [A-Za-z0-9_.:-]")


class Category(StrEnum):
    USER_PROFILE = "user_profile"
    PREFERENCE = "preference"
    PERSONALITY = "personality"
    GOAL = "goal"
    SKILL = "skill"
    RELATIONSHIP = "relationship"
    EMOTIONAL_PATTERN = "emotional_pattern"
    CONVERSATION_STYLE = "conversation_style"


NAMESPACE_FOR_CATEGORY: dict[Category, str] = {
    Category.USER_PROFILE: "profile",
    Category.PREFERENCE: "preference",
    Category.PERSONALITY: "personality",
    Category.GOAL: "goal",
    Category.SKILL: "skill",
    Category.RELATIONSHIP: "relationship",
    Category.EMOTIONAL_PATTERN: "emotion",
    Category.CONVERSATION_STYLE: "style",
}


def memory_key_problem(category: Category | None, memory_key: str) -> str | None:
    """Why ``memory_key`` is not acceptable for ``category`` (None when it is)."""
    namespace, _, topic = memory_key.partition(".")
    if not topic or not re.fullmatch(TOPIC_PATTERN, topic):
        return "memory_key must be 'namespace.topic' with a topic of 1-64 chars of [a-z0-9_]"
    if category is None:
        return "a memory_key needs a category (the namespace is bound to it)"
    expected = NAMESPACE_FOR_CATEGORY[category]
    if namespace != expected:
        return f"memory_key namespace '{namespace}' does not match category '{category.value}': use '{expected}.<topic>'"
    return None


class MemoryStatus(StrEnum):
    ACTIVE = "active"
    FORGOTTEN = "forgotten"
    SUPERSEDED = "superseded"  # a later memory says what changed; kept for history and recall as_of


class Provenance(BaseModel):
    """Where an extracted memory came from: the daily log, the extraction task, and the turns
    (indices into the log's ``turns``) that say it. ``log_date`` is filled in by the service."""

    model_config = ConfigDict(extra="forbid")

    log_id: UUID
    task_id: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")
    turns: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list, max_length=1_000,
                             description="indices into the log's turns (0-based)")
    log_date: date | None = Field(None, description="the log's date (set by the service)")
    turn_digests: list[Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")]] = Field(
        default_factory=list, max_length=1_000, exclude_if=lambda v: not v,
        description="a digest of each of those turns' speaker and words, in order (set by the service from the "
        "log as stored, unless given for every turn): a later save of the log without them is recognised "
        "whatever their indices become")

    @field_validator("turns")
    @classmethod
    def _indices(cls, value: list[int]) -> list[int]:
        if any(i < 0 for i in value):
            raise ValueError("turn indices are 0-based and never negative")
        return value


_PROVENANCE_DESCRIPTION = "for a memory extracted from a daily log: the log, the task and the turns it came from"
MAX_CLIENT_CHARS = 160
_CLIENT_DESCRIPTION = (
    "the assistant that wrote this version, as its MCP client named itself at initialize ('name/version'); "
    "set by the gateway, never by the model"
)


class DecidedBy(StrEnum):
    RULES = "rules"
    LLM = "llm"
    AGENT = "agent"
    PERSON = "person"


def _none(v: object) -> bool:
    return v is None


def _empty(v: object) -> bool:
    return not v


class Supersession(BaseModel):
    """Why a memory was superseded (or flagged against another): a readable reason, how sure, by whom."""

    model_config = ConfigDict(extra="forbid")

    memory_id: UUID = Field(description="the other memory: the newer one (superseded_by) or the one flagged against")
    reason: str = Field(max_length=500)
    confidence: float = Field(ge=0.0, le=1.0)
    decided_by: DecidedBy = DecidedBy.RULES


class MemorySource(BaseModel):
    """One saying of a merged memory: where and when it was said (the first saying is the memory's own)."""

    model_config = ConfigDict(extra="forbid")

    said_at: datetime
    source: str
    provenance: Provenance | None = Field(None, exclude_if=_none)
    content: str | None = Field(None, description="the words of this saying when they differ from the memory's",
                                exclude_if=_none)


#: ``MemoryState.source`` of the memories ``engram import`` saves from another system's export
IMPORTED_SOURCES: tuple[str, ...] = ("mem0", "supermemory", "chat")
#: Where a memory came from, as a person filters it: ``imported`` (restored from an Engram export, or
#: saved from a mem0, Supermemory or chat export), ``extracted`` (learnt here from a daily log: it has
#: provenance), ``saved`` (written here by a save: MCP, REST, a bulk save).
Origin = Literal["saved", "extracted", "imported"]


class MemoryState(BaseModel):
    """A memory as it stands after an event: the `data` of every memory event. The fields after
    ``client`` (issue 30: supersession, merge, decay) are absent from older events and from a
    memory that never needed them."""

    model_config = ConfigDict(extra="forbid")

    id: UUID
    tenant: str
    project: str
    content: str
    context: str | None = None
    category: Category | None = None
    memory_key: str | None = None
    importance: int = Field(3, ge=1, le=5)
    confidence: float = Field(0.8, ge=0.0, le=1.0)
    source: str = "conversation"
    version: int = Field(1, ge=1)
    status: MemoryStatus = MemoryStatus.ACTIVE
    forget_reason: str | None = None
    created_at: datetime
    updated_at: datetime
    provenance: Provenance | None = Field(None, exclude_if=lambda v: v is None)  # absent in older events
    client: str | None = Field(None, description=_CLIENT_DESCRIPTION, exclude_if=lambda v: v is None)  # idem
    valid_from: datetime | None = Field(None, exclude_if=_none,
                                        description="when it was said (an extracted fact: its log's date); else created_at")
    valid_until: datetime | None = Field(None, exclude_if=_none, description="when a later memory superseded it")
    superseded_by: Supersession | None = Field(None, exclude_if=_none)
    supersedes: list[Supersession] = Field(default_factory=list, exclude_if=_empty,
                                           description="the memories this one superseded when it was written, and why")
    conflicts: list[Supersession] = Field(default_factory=list, exclude_if=_empty,
                                          description="memories this one may contradict, flagged for a person or agent")
    repeats: int = Field(1, ge=1, exclude_if=lambda v: v == 1, description="how many times this fact was said")
    sources: list[MemorySource] = Field(default_factory=list, exclude_if=_empty,
                                        description="every later saying merged into this memory")
    pinned: bool = Field(False, exclude_if=lambda v: v is False, description="never fades in recall")
    forget_after: datetime | None = Field(None, exclude_if=_none, description="leaves recall after this moment")


# commands ---------------------------------------------------------------------------------
class SaveMemory(BaseModel):
    """Save a memory.

    Free-form (no category): saving the exact same content in the same project returns the
    existing memory. Structured (with a category): content ≤ 4,000 chars, addressed by
    ``memory_key`` (generated from the content when omitted); saving an existing key updates it.
    """

    model_config = ConfigDict(extra="forbid")

    project: str = Project
    category: Category | None = None
    memory_key: str | None = Field(None, pattern=TEXT_PATTERN, max_length=80)
    content: str = Field(min_length=1, pattern=TEXT_PATTERN, max_length=MAX_CONTENT_CHARS)
    context: str | None = Field(
        None, min_length=1, max_length=MAX_CONTEXT_CHARS, pattern=TEXT_PATTERN,
        description=_CONTEXT_DESCRIPTION,
    )
    importance: int = Field(3, ge=1, le=5)
    confidence: float = Field(0.8, ge=0.0, le=1.0)
    source: str = Field("mcp", min_length=1, pattern=TEXT_PATTERN, max_length=64)
    provenance: Provenance | None = Field(None, description=_PROVENANCE_DESCRIPTION, exclude_if=lambda v: v is None)
    client: str | None = Field(None, min_length=1, max_length=MAX_CLIENT_CHARS, pattern=TEXT_PATTERN,
                               description=_CLIENT_DESCRIPTION, exclude_if=lambda v: v is None)

    @field_validator("memory_key")
    @classmethod
    def _key_matches_category(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            problem = memory_key_problem(info.data.get("category"), value)
            if problem:
                raise ValueError(problem)
        return value

    @field_validator("content")
    @classmethod
    def _structured_limit(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("category") is not None and len(value) > MAX_STRUCTURED_CONTENT_CHARS:
            raise ValueError(
                f"content of a categorised memory is limited to {MAX_STRUCTURED_CONTENT_CHARS} characters"
            )
        return value


class UpdateMemory(BaseModel):
    """Write a new version of an existing memory, found by ``id`` or by ``memory_key`` (exactly one)."""

    model_config = ConfigDict(extra="forbid")

    project: str = Project
    id: UUID | None = None
    memory_key: str | None = Field(None, pattern=TEXT_PATTERN, max_length=80)
    content: str | None = Field(None, min_length=1, pattern=TEXT_PATTERN, max_length=MAX_STRUCTURED_CONTENT_CHARS)
    context: str | None = Field(
        None, min_length=1, max_length=MAX_CONTEXT_CHARS, pattern=TEXT_PATTERN,
        description=_CONTEXT_DESCRIPTION + "; omitted = kept",
    )
    category: Category | None = None
    importance: int | None = Field(None, ge=1, le=5)
    confidence: float | None = Field(None, ge=0.0, le=1.0)
    source: str | None = Field(None, min_length=1, pattern=TEXT_PATTERN, max_length=64)
    provenance: Provenance | None = Field(
        None, description=_PROVENANCE_DESCRIPTION + "; omitted = kept", exclude_if=lambda v: v is None,
    )
    client: str | None = Field(None, min_length=1, max_length=MAX_CLIENT_CHARS, pattern=TEXT_PATTERN,
                               description=_CLIENT_DESCRIPTION, exclude_if=lambda v: v is None)

    @model_validator(mode="after")
    def _one_target(self) -> UpdateMemory:
        if (self.id is None) == (self.memory_key is None):
            raise ValueError("give exactly one of id or memory_key")
        if all(v is None for v in (self.content, self.context, self.category, self.importance, self.confidence,
                                   self.source)):
            raise ValueError("nothing to update: give content, context, category, importance, confidence or source")
        return self


class ForgetMemory(BaseModel):
    """Forget a memory: by id, or by content (exact match first, then semantic ≥ threshold)."""

    model_config = ConfigDict(extra="forbid")

    project: str = Project
    content: str | None = Field(None, min_length=1, pattern=TEXT_PATTERN, max_length=MAX_CONTENT_CHARS)
    memory_id: UUID | None = None
    reason: str | None = Field(None, pattern=TEXT_PATTERN, max_length=1_000)
    client: str | None = Field(None, min_length=1, max_length=MAX_CLIENT_CHARS, pattern=TEXT_PATTERN,
                               description=_CLIENT_DESCRIPTION, exclude_if=lambda v: v is None)


class SaveMemoryResult(BaseModel):
    memory_id: UUID
    project: str
    version: int
    memory_key: str | None = None
    created: bool = Field(description="false when an existing memory was updated or already held this content")
    updated: bool = Field(False, description="true when a new version of an existing memory was written")
    merged: bool = Field(False, description="true when the content repeated an existing memory's meaning: "
                         "memory_id is that memory, which now counts this saying among its sources")
    supersedes: list[UUID] = Field(default_factory=list,
                                   description="memories this save superseded (a changed fact: they leave recall)")
    flagged: list[UUID] = Field(default_factory=list,
                                description="memories this one may contradict: listed by list_conflicts to settle")
    reinstated: list[UUID] = Field(
        default_factory=list, exclude_if=lambda v: not v,
        description="an update only: memories this one had superseded that its new content no longer changes, "
        "current again")


def _moment(value: object) -> object:
    """An ISO 8601 date (its midnight, UTC) or date-time (UTC when it names no offset); nothing else
    (a number is not read as a Unix time)."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = datetime.fromisoformat(text.replace("Z", "+00:00")) if "T" in text or " " in text \
                else datetime.combine(date.fromisoformat(text), datetime.min.time())
        except ValueError:
            raise ValueError("must be an ISO 8601 date (2026-05-01) or date-time (2026-05-01T12:00:00Z)") from None
    elif value is not None and not isinstance(value, datetime):
        raise ValueError("must be an ISO 8601 date (2026-05-01) or date-time (2026-05-01T12:00:00Z) string")
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    if isinstance(value, datetime):
        try:
            value.astimezone(UTC)
        except OverflowError:  # 0001-01-01T00:00+01:00 is in the year 0 in UTC, which no date-time
            # holds: the first moment there is (before anything was said), or the last one
            return (datetime.min if value.year == 1 else datetime.max).replace(tzinfo=UTC)
    return value


_AS_OF_DESCRIPTION = (
    "answer as Engram knew things at this moment (ISO 8601 date or date-time, UTC unless an offset is given): "
    "only memories said by then, each as it stood then; what changed since is marked (changed_since)"
)
#: a moment given by a caller: an ISO 8601 string, UTC unless it names an offset
Moment = Annotated[datetime | None, BeforeValidator(_moment)]
AsOf = Moment


def _moment_end(value: object) -> object:
    """The end of a range, exclusive: a date alone is through that day's end (the next midnight), a
    date-time is through that instant (one microsecond after it)."""
    text = value.strip() if isinstance(value, str) else None
    moment = _moment(value)
    if not isinstance(moment, datetime):
        return moment
    try:
        return moment + (timedelta(days=1) if text is not None and "T" not in text and " " not in text
                         else timedelta(microseconds=1))
    except OverflowError:  # through the last day there is
        return datetime.max.replace(tzinfo=UTC)


#: the end of a caller's range (through a date's end, or through a date-time), kept as its exclusive bound
MomentEnd = Annotated[datetime | None, BeforeValidator(_moment_end)]
#: GET /v1/memories' orders: importance (most important, then most recently changed), newest or oldest created
ListSort = Literal["importance", "newest", "oldest"]
#: a listing's page cursor (next_cursor of the page before): opaque, URL-safe
CURSOR_PATTERN = r"^[A-Za-z0-9_-]{1,512}$"


class SettleConflict(BaseModel):
    """Settle a pair of memories flagged as possibly contradicting each other (list_conflicts)."""

    model_config = ConfigDict(extra="forbid")

    project: str = Project
    memory_id: UUID = Field(description="the flagged memory (list_conflicts' memory.id)")
    other_id: UUID = Field(description="the memory it was flagged against (list_conflicts' other.id)")
    keep: Literal["both", "memory", "other"] = Field(
        description="both: they do not contradict, both stand; memory: memory_id is current, other_id is superseded "
        "by it; other: other_id is current, memory_id is superseded by it")
    reason: str | None = Field(None, min_length=1, pattern=TEXT_PATTERN, max_length=1_000,
                               description="why (its first 500 characters are kept with the supersession)")
    client: str | None = Field(None, min_length=1, max_length=MAX_CLIENT_CHARS, pattern=TEXT_PATTERN,
                               description=_CLIENT_DESCRIPTION)


class SettleConflictResult(BaseModel):
    settled: bool
    current: list[UUID] = Field(description="the memories that stand after settling")
    superseded: UUID | None = Field(None, description="the memory superseded, if one was")
    message: str


class UnmergeMemory(BaseModel):
    """Undo a merge: the saying one ``MemoryMerged`` version of a memory added (get_memory_history shows
    them) leaves the memory and becomes a memory of its own, in its own words, said when it was said.
    The memory counts one saying fewer; the content and importance that merge changed go back, unless
    changed again since."""

    model_config = ConfigDict(extra="forbid")

    project: str = Project
    memory_id: UUID
    version: int = Field(ge=2, le=1_000_000, description="the version of the memory the merge wrote (its history's "
                         "MemoryMerged entry)")
    client: str | None = Field(None, min_length=1, max_length=MAX_CLIENT_CHARS, pattern=TEXT_PATTERN,
                               description=_CLIENT_DESCRIPTION)


class UnmergeMemoryResult(BaseModel):
    unmerged: bool = Field(description="false when that saying had left the memory already (the same answer again)")
    memory_id: UUID = Field(description="the memory the saying was merged into")
    split_id: UUID = Field(description="the memory the saying is now")
    repeats: int = Field(description="how many sayings the memory counts now")
    message: str


class MoveMemory(BaseModel):
    """Move a memory to another project of the same user: it becomes a memory of that project (its
    words, fields, sayings, pin and when it was said go with it; a keyed memory keeps its key there)
    and the one left behind is forgotten with a reason naming the new one. A relation to memories of
    the old project (what it superseded, open conflicts) stays behind."""

    model_config = ConfigDict(extra="forbid")

    project: str = Project
    memory_id: UUID
    to_project: str = Field(pattern=PROJECT_PATTERN, description="the project it moves to")
    client: str | None = Field(None, min_length=1, max_length=MAX_CLIENT_CHARS, pattern=TEXT_PATTERN,
                               description=_CLIENT_DESCRIPTION)


class MoveMemoryResult(BaseModel):
    moved: bool = Field(description="false when it had been moved there already (the same answer again)")
    memory_id: UUID = Field(description="the memory in its new project")
    moved_from: UUID = Field(description="the memory left behind (forgotten)")
    project: str = Field(description="the project it is in now")
    reinstated: list[UUID] = Field(
        default_factory=list, exclude_if=lambda v: not v,
        description="the memories it had superseded in its old project, current again there: the moved memory "
        "has no relation to that project's memories")
    message: str


class MergeMemory(BaseModel):
    """Merge two memories that say the same fact: ``memory_id`` becomes one more saying of ``into``
    (its words, when and where it was said, and the sayings merged into it before), and is forgotten
    with a reason naming ``into``. ``into`` counts the sayings of both and keeps the higher importance.
    Reversible: unmerge_memory on the MemoryMerged version this writes gives the saying back as a
    memory of its own."""

    model_config = ConfigDict(extra="forbid")

    project: str = Project
    memory_id: UUID = Field(description="the duplicate: it becomes a saying of ``into``")
    into: UUID = Field(description="the memory that stays")
    reason: str | None = Field(None, pattern=TEXT_PATTERN, max_length=1_000,
                               description="why they are the same fact (kept in the duplicate's history)")
    client: str | None = Field(None, min_length=1, max_length=MAX_CLIENT_CHARS, pattern=TEXT_PATTERN,
                               description=_CLIENT_DESCRIPTION)


class MergeMemoryResult(BaseModel):
    merged: bool = Field(description="false when the duplicate had been merged into it already (the same answer again)")
    memory_id: UUID = Field(description="the memory that stays")
    merged_id: UUID = Field(description="the duplicate, now forgotten: one of its sayings")
    repeats: int = Field(description="how many sayings the memory counts now")
    message: str


class PinMemory(BaseModel):
    """Pin a memory (it never fades in recall), unpin it, or set when it leaves recall (forget_after)."""

    model_config = ConfigDict(extra="forbid")

    project: str = Project
    memory_id: UUID
    pinned: bool | None = Field(None, description="true: never fades in recall; false: fades like others")
    forget_after: Moment = Field(None, description="leaves recall after this moment (ISO 8601; it stays in "
                                          "its history; a moment already past: it leaves recall now)")
    clear_forget_after: bool = Field(False, description="remove a forget_after set before")
    client: str | None = Field(None, min_length=1, max_length=MAX_CLIENT_CHARS, pattern=TEXT_PATTERN,
                               description=_CLIENT_DESCRIPTION)

    @model_validator(mode="after")
    def _something(self) -> PinMemory:
        if self.pinned is None and self.forget_after is None and not self.clear_forget_after:
            raise ValueError("give pinned, forget_after or clear_forget_after")
        if self.forget_after is not None and self.clear_forget_after:
            raise ValueError("forget_after and clear_forget_after exclude each other")
        if self.forget_after is not None and self.forget_after.tzinfo is None:
            self.forget_after = self.forget_after.replace(tzinfo=UTC)
        return self


class ReinstateExpired(BaseModel):
    """The memories ``memory_id`` superseded, current again once its ``forget_after`` has passed: a
    fact is hidden only by the statement that changed it, and a statement past its expiry no longer
    says anything in recall. The memory service's expiry round sends it (no MCP tool or REST route);
    nothing happens while the memory has not expired."""

    model_config = ConfigDict(extra="forbid")

    memory_id: UUID


class ReinstateExpiredResult(BaseModel):
    expired: bool = Field(description="whether the memory's forget_after had passed")
    reinstated: list[UUID] = Field(default_factory=list, exclude_if=lambda v: not v,
                                   description="the memories it had superseded, current again")
    message: str


class ForgetMemoryResult(BaseModel):
    forgotten: bool
    match: Literal["id", "exact", "semantic"] | None = None
    similarity: float | None = None
    memory_id: UUID | None = None
    content: str | None = None
    reinstated: list[UUID] = Field(
        default_factory=list, exclude_if=lambda v: not v,
        description="the memories the forgotten one had superseded, current again: a fact is hidden only by the "
        "statement that changed it, so withdrawing that statement brings the fact back (forget them too if they "
        "are not true either)")
    message: str


# events -----------------------------------------------------------------------------------
class MemoryEventType(StrEnum):
    SAVED = "MemorySaved"
    UPDATED = "MemoryUpdated"
    FORGOTTEN = "MemoryForgotten"
    SUPERSEDED = "MemorySuperseded"  # a later memory said what changed: valid_until, superseded_by
    MERGED = "MemoryMerged"  # the same fact said again: a source added, repeats + 1
    CONFLICT_SETTLED = "MemoryConflictSettled"  # a flagged pair settled by a person or agent
    PINNED = "MemoryPinned"  # pinned / unpinned, or an expiry (forget_after) set
    UNMERGED = "MemoryUnmerged"  # a merge undone: the saying left the memory (and became a memory of its own)
    REINSTATED = "MemoryReinstated"  # the memory that superseded it was forgotten: current again


#: the memory service's aggregate of memories (``<ns>.evt.<tenant>.memory.<id>``): every event's
#: ``data`` is a :class:`MemoryState`
MEMORY_AGGREGATE = aggregate("memory", MEMORY, MemoryState, MemoryEventType)


# queries ----------------------------------------------------------------------------------
class RecallMode(StrEnum):
    HYBRID = "hybrid"
    DENSE = "dense"
    KEYWORD = "keyword"
    #: hybrid recall, then a second hop for questions that need several memories put together
    #: (see ``Recall``); slower
    DEEP = "deep"




class Recall(BaseModel):
    """Find the memories most relevant to a query: hybrid dense + keyword search (RRF fusion) whose best
    candidates are scored by token-level late interaction and put in order by a ranker fitted on
    conversations (both scores, whom each memory is about, what it says, the conversation it was said in;
    hit scores are then rank scores in (0, 1], 1 = first; RRF sums where the server has late interaction
    off). ``dense`` and ``keyword`` modes return the engine's own order and scores. ``deep`` is
    ``hybrid`` followed by a second pass, for questions that need several memories put together: the
    candidates about the people the question names are ranked up, a question joining two things ("X and
    Y", "before/after X") is also searched part by part, and the lists are fused (scores are fused rank
    scores in (0, 1])."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, pattern=TEXT_PATTERN, max_length=MAX_QUERY_CHARS)
    project: str | None = Field(None, pattern=PROJECT_PATTERN)
    limit: int = Field(10, ge=1, le=MAX_RECALL_LIMIT)
    mode: RecallMode = RecallMode.HYBRID
    include_profile: bool = Field(
        False, description="also return the profile of the same scope (one round trip instead of two)"
    )
    rerank: bool = Field(
        False,
        description="re-order the best candidates again with a cross-encoder that reads the query and each "
        "memory (after its context) together, fused with the order found so far: a little more precise "
        "(LoCoMo R@5 / R@10 0.73 / 0.80 → 0.73 / 0.81) but ~0.7 s more per call on 2 cores; hit scores are "
        "fused rank scores in (0, 1], 1 = first for both",
    )
    as_of: AsOf = Field(None, description=_AS_OF_DESCRIPTION)


class GetMemoryByKey(BaseModel):
    model_config = ConfigDict(extra="forbid")

    project: str = Project
    memory_key: str = Field(pattern=MEMORY_KEY_PATTERN, max_length=80)


class RecallMemory(BaseModel):
    """List memories by category and/or keyword (substring, any language), most important first."""

    model_config = ConfigDict(extra="forbid")

    project: str | None = Field(None, pattern=PROJECT_PATTERN)
    category: Category | None = None
    keyword: str | None = Field(None, min_length=1, pattern=TEXT_PATTERN, max_length=MAX_KEYWORD_CHARS)
    limit: int = Field(20, ge=1, le=MAX_RECALL_LIMIT)
    as_of: AsOf = Field(None, description=_AS_OF_DESCRIPTION)
    status: Literal["current", "superseded", "forgotten", "all"] = Field(
        "current", description="current (default): what stands now; superseded: facts a later one replaced; "
        "forgotten: what was forgotten (its last words, kept in its history); all: every one. With as_of, "
        "of that moment: current what stood then, superseded what had been replaced by then, all both "
        "(forgotten ones are never answered as of a moment)")
    created_from: Moment = Field(None, description="only memories created at or after this moment (ISO 8601 date "
                                 "or date-time, UTC unless an offset is given)")
    created_to: MomentEnd = Field(None, description="only memories created up to this moment: a date alone is "
                                  "through that day's end, a date-time through that instant")
    source: Origin | None = Field(
        None, description="saved: written here by a save (MCP, REST, a bulk save); extracted: learnt here from "
        "a daily log (it has provenance); imported: restored from an Engram export or saved from a mem0, "
        "Supermemory or chat export by `engram import` (each memory is one of the three: its origin)")
    sort: ListSort = Field("importance", description="importance (default: most important first, then the most "
                           "recently changed), newest or oldest (by when it was created)")
    cursor: str | None = Field(None, pattern=CURSOR_PATTERN, description="the next page: next_cursor of the "
                               "page before, with the same sort (not with as_of)")


class MemoryHistoryQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    memory_id: UUID


class ListConflicts(BaseModel):
    """The memories flagged as possibly contradicting another, for a person or agent to settle."""

    model_config = ConfigDict(extra="forbid")

    project: str | None = Field(None, pattern=PROJECT_PATTERN)
    limit: int = Field(20, ge=1, le=MAX_RECALL_LIMIT)


class ConflictView(BaseModel):
    memory: MemoryView = Field(description="the memory flagged (the later of the two, when it was written)")
    other: MemoryView = Field(description="the memory it may contradict")
    reason: str
    confidence: float


class ConflictList(BaseModel):
    conflicts: list[ConflictView]


class GetMemory(BaseModel):
    """One memory by its id, as it stands now (its current version, forgotten or not); none outside
    the caller's project."""

    model_config = ConfigDict(extra="forbid")

    memory_id: UUID


#: A recall hit or a listed memory carries the first this many characters of a longer content (a
#: pasted document), cut at a word, and its whole length (``content_chars``): a reply holds many
#: memories, and the bus carries at most 1 MB a message (NATS's default ``max_payload``). ``get``
#: answers the whole content.
LISTED_CONTENT_CHARS = 2_000


class MemoryView(BaseModel):
    id: UUID
    project: str
    content: str
    context: str | None = None
    category: Category | None = None
    memory_key: str | None = None
    importance: int
    confidence: float
    source: str
    version: int
    status: MemoryStatus
    created_at: datetime
    updated_at: datetime
    provenance: Provenance | None = None
    valid_from: datetime | None = Field(None, description="when it was said, when that differs from created_at")
    valid_until: datetime | None = Field(None, description="when a later memory superseded it")
    superseded_by: Supersession | None = Field(None, description="the memory that superseded it, and why")
    supersedes: list[Supersession] = Field(default_factory=list, description="the memories it superseded, and why")
    repeats: int = Field(1, description="how many times this fact was said (merged sayings)")
    pinned: bool = False
    forget_after: datetime | None = None
    origin: Origin | None = Field(None, description="where it came from: saved here, extracted here from a daily "
                                  "log, or imported (absent from a recall hit whose point was written before origins were kept)")
    changed_since: MemoryRelation | None = Field(
        None, description="in an answer as of a past moment: what replaced this since (a newer version of it: "
        "newer_version, or the memory that superseded it: superseded_by); absent when it still stands as shown")
    content_chars: int | None = Field(
        None, exclude_if=lambda v: v is None,
        description="in a recall hit or a list: the whole content's length when `content` is only its start "
        f"(a memory longer than {LISTED_CONTENT_CHARS:,} characters); get the memory by id for all of it")


_Cut = TypeVar("_Cut", "MemoryView", "MemoryVersion")


def abridged(view: _Cut, limit: int = LISTED_CONTENT_CHARS) -> _Cut:
    """``view`` (a memory, or a version of one) as a recall hit, a list or a long history shows it:
    its content's first ``limit`` characters (cut at a word) and its whole length, when it is longer."""
    if len(view.content) <= limit:
        return view
    cut = view.content[:limit]
    space = cut.rfind(" ")
    return view.model_copy(update={"content": cut[:space] if space > limit * 4 // 5 else cut,
                                   "content_chars": view.content_chars or len(view.content)})


class MemoryLookup(BaseModel):
    found: bool
    memory: MemoryView | None = None


class MemoryList(BaseModel):
    memories: list[MemoryView]
    next_cursor: str | None = Field(None, exclude_if=lambda v: v is None,
                                    description="more match: pass it as cursor (same filters and sort) for the next page")


class MemoryVersion(BaseModel):
    """One version of a memory, as the event log recorded it."""

    version: int
    event: str
    sequence: int
    occurred_at: datetime
    content: str
    context: str | None = None
    status: MemoryStatus
    category: Category | None = None
    memory_key: str | None = None
    importance: int
    confidence: float
    forget_reason: str | None = None
    valid_until: datetime | None = Field(None, description="when a later version superseded this one")
    provenance: Provenance | None = None
    source: str | None = Field(None, description="where this version came from (the write's source)")
    client: str | None = Field(None, description=_CLIENT_DESCRIPTION)
    content_chars: int | None = Field(
        None, exclude_if=lambda v: v is None,
        description="the whole content's length when `content` is only its start: a history too large for one "
        f"answer carries its earlier versions' first {LISTED_CONTENT_CHARS:,} characters (the newest whole)")


class MemoryHistory(BaseModel):
    memory_id: UUID
    versions: list[MemoryVersion]
    sayings: list[MemorySource] = Field(
        default_factory=list, description="every time the memory's fact was said, as it stands now: its own first, "
        "then each merged one (when, by what source, the log and turns it came from, and its words when they "
        "differ); as many as its repeats (the last 100)")


class RelationKind(StrEnum):
    """How another memory relates to a recall hit (the compact form's arrows in parentheses)."""

    PREVIOUS_VERSION = "previous_version"  # ← the version this one replaced
    NEWER_VERSION = "newer_version"  # → a version written after the one recalled
    SIMILAR = "similar"  # ~ a nearest neighbour in the vector index
    SUPERSEDES = "supersedes"  # ⇐ an older memory this one superseded (a changed fact; left out of recall)
    SUPERSEDED_BY = "superseded_by"  # ⇒ the memory that superseded this one (recall as_of a past moment)


MAX_HIT_RELATIONS = 4
MAX_HIT_DOCUMENTS = 3
EXCERPT_CHARS = 80


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """The start of ``text`` on one line, cut at a word with an ellipsis when longer than ``limit``
    (a related memory named in a recall hit)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,.;:") + "…"


class MemoryRelation(BaseModel):
    kind: RelationKind
    memory_id: UUID
    version: int | None = Field(None, description="for previous/newer versions: that version's number")
    score: float | None = Field(None, description="for similar memories: cosine similarity")
    rank: int | None = Field(None, description="the related memory's rank in this same recall, when it is a hit too")
    excerpt: str | None = Field(None, description="the start of the related memory's content, when known")


class SourceDocument(BaseModel):
    """A daily log the memory (or one of its versions) was extracted from."""

    log_id: UUID
    log_date: date | None = None
    task_id: str | None = None
    turns: list[int] = Field(default_factory=list)


class RecallHit(BaseModel):
    memory: MemoryView
    score: float
    relations: list[MemoryRelation] = Field(
        default_factory=list, max_length=MAX_HIT_RELATIONS,
        description="other memories related to this hit: its previous or newer version, similar memories "
        "(the best hits only; at most 4)",
    )
    documents: list[SourceDocument] = Field(
        default_factory=list, max_length=MAX_HIT_DOCUMENTS,
        description="the daily logs it was extracted from (at most 3, newest version first)",
    )


class RecallResult(BaseModel):
    hits: list[RecallHit]
    profile: Profile | None = Field(None, description="with include_profile: the profile of the same scope")


# shared memories ---------------------------------------------------------------------------
MAX_TITLE_CHARS = 200


class SaveSharedMemory(BaseModel):
    """A shared experience, unique per (user, title): saving the same title again updates it."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, pattern=TEXT_PATTERN, max_length=MAX_TITLE_CHARS)
    event: str = Field(min_length=1, pattern=TEXT_PATTERN, max_length=MAX_STRUCTURED_CONTENT_CHARS)
    importance: int = Field(3, ge=1, le=5)


class SharedMemoryState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: UUID
    tenant: str
    title: str
    event: str
    importance: int
    version: int
    created_at: datetime
    updated_at: datetime


class SharedMemoryView(BaseModel):
    id: UUID
    title: str
    event: str
    importance: int
    version: int
    created_at: datetime
    updated_at: datetime


class SaveSharedMemoryResult(BaseModel):
    shared_memory_id: UUID
    title: str
    version: int
    created: bool
    updated: bool


class GetSharedMemories(BaseModel):
    """By exact title, or by keyword over title and event (substring, any language); newest first."""

    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(None, min_length=1, pattern=TEXT_PATTERN, max_length=MAX_TITLE_CHARS)
    keyword: str | None = Field(None, min_length=1, pattern=TEXT_PATTERN, max_length=MAX_KEYWORD_CHARS)
    limit: int = Field(20, ge=1, le=MAX_RECALL_LIMIT)


def more_description(narrowed_by: str) -> str:
    """What a list's ``more`` says: its items may be large, so one answer carries only the first that
    fit in about 600 KB (the bus carries 1 MB a message) and has no next page."""
    return (f"true when more matched than one answer carries (about 600 KB of items, the newest first): narrow "
            f"the list by {narrowed_by} for the rest")


class SharedMemoryList(BaseModel):
    shared_memories: list[SharedMemoryView]
    more: bool | None = Field(None, exclude_if=lambda v: v is None, description=more_description("title or keyword"))


class SharedMemoryEventType(StrEnum):
    SAVED = "SharedMemorySaved"
    UPDATED = "SharedMemoryUpdated"


#: shared memories (``<ns>.evt.<tenant>.shared.<id>``): every event's ``data`` is a :class:`SharedMemoryState`
SHARED_MEMORY_AGGREGATE = aggregate("shared", MEMORY, SharedMemoryState, SharedMemoryEventType)


# projects and profile ------------------------------------------------------------------------
class ListProjects(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProjectInfo(BaseModel):
    project: str
    memories: int
    last_updated: datetime


#: A project list names at most this many projects, the most recently used first (an agent that
#: gives every conversation a containerTag makes thousands; ~7,000 would be more than a bus message).
MAX_LISTED_PROJECTS = 1_000


class ProjectList(BaseModel):
    projects: list[ProjectInfo]
    total: int | None = Field(None, exclude_if=lambda v: v is None,
                              description=f"how many projects there are, when there are more than listed (the "
                              f"{MAX_LISTED_PROJECTS:,} most recently used are)")


class GetProfile(BaseModel):
    """The user's profile: stable facts and what changed lately, per project (or all projects)."""

    model_config = ConfigDict(extra="forbid")

    project: str | None = Field(None, pattern=PROJECT_PATTERN)
    static_limit: int = Field(20, ge=1, le=100)
    dynamic_limit: int = Field(10, ge=1, le=100)
    as_of: AsOf = Field(None, description=_AS_OF_DESCRIPTION)


class Profile(BaseModel):
    static: list[MemoryView] = Field(description="stable facts: profile, preferences, personality, skills, goals, style")
    dynamic: list[MemoryView] = Field(description="recent context: the most recently changed memories")


MemoryView.model_rebuild()
RecallResult.model_rebuild()


for _name, _model, _result in (
    ("save_memory", SaveMemory, SaveMemoryResult),
    ("update_memory", UpdateMemory, SaveMemoryResult),
    ("forget_memory", ForgetMemory, ForgetMemoryResult),
    ("save_shared_memory", SaveSharedMemory, SaveSharedMemoryResult),
    ("settle_conflict", SettleConflict, SettleConflictResult),
    ("pin_memory", PinMemory, SaveMemoryResult),
    ("unmerge_memory", UnmergeMemory, UnmergeMemoryResult),
    ("merge_memory", MergeMemory, MergeMemoryResult),
    ("move_memory", MoveMemory, MoveMemoryResult),
    ("reinstate_expired", ReinstateExpired, ReinstateExpiredResult),
):
    command(MEMORY, _name, result=_result)(_model)
for _name, _model, _result in (
    ("recall", Recall, RecallResult),
    ("get_memory_by_key", GetMemoryByKey, MemoryLookup),
    ("get_memory", GetMemory, MemoryView),
    ("list_conflicts", ListConflicts, ConflictList),
    ("recall_memory", RecallMemory, MemoryList),
    ("memory_history", MemoryHistoryQuery, MemoryHistory),
    ("get_shared_memories", GetSharedMemories, SharedMemoryList),
    ("list_projects", ListProjects, ProjectList),
    ("profile", GetProfile, Profile),
):
    query(MEMORY, _name, result=_result)(_model)

del _name, _model, _result

COMMANDS: dict[str, type[BaseModel]] = {name: spec.model for name, spec in messages_of(MEMORY, "command").items()}
QUERIES: dict[str, type[BaseModel]] = {name: spec.model for name, spec in messages_of(MEMORY, "query").items()}
