"""Memory service contracts: commands, events, queries and their results."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

PROJECT_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
DEFAULT_PROJECT = "default"
MAX_CONTENT_CHARS = 200_000
MAX_QUERY_CHARS = 10_000
MAX_RECALL_LIMIT = 100

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


class MemoryStatus(StrEnum):
    ACTIVE = "active"
    FORGOTTEN = "forgotten"


class MemoryState(BaseModel):
    """A memory as it stands after an event: the `data` of every memory event."""

    model_config = ConfigDict(extra="forbid")

    id: UUID
    tenant: str
    project: str
    content: str
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


# commands ---------------------------------------------------------------------------------
class SaveMemory(BaseModel):
    """Save a memory. Saving the exact same content in the same project returns the existing one."""

    model_config = ConfigDict(extra="forbid")

    project: str = Project
    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    category: Category | None = None
    importance: int = Field(3, ge=1, le=5)
    confidence: float = Field(0.8, ge=0.0, le=1.0)
    source: str = Field("mcp", min_length=1, max_length=64)


class ForgetMemory(BaseModel):
    """Forget a memory: by id, or by content (exact match first, then semantic ≥ threshold)."""

    model_config = ConfigDict(extra="forbid")

    project: str = Project
    content: str | None = Field(None, min_length=1, max_length=MAX_CONTENT_CHARS)
    memory_id: UUID | None = None
    reason: str | None = Field(None, max_length=1_000)


class SaveMemoryResult(BaseModel):
    memory_id: UUID
    project: str
    version: int
    created: bool = Field(description="false when an identical active memory already existed")


class ForgetMemoryResult(BaseModel):
    forgotten: bool
    match: Literal["id", "exact", "semantic"] | None = None
    similarity: float | None = None
    memory_id: UUID | None = None
    content: str | None = None
    message: str


# events -----------------------------------------------------------------------------------
class MemoryEventType(StrEnum):
    SAVED = "MemorySaved"
    FORGOTTEN = "MemoryForgotten"


# queries ----------------------------------------------------------------------------------
class RecallMode(StrEnum):
    HYBRID = "hybrid"
    DENSE = "dense"
    KEYWORD = "keyword"


class Recall(BaseModel):
    """Find the memories most relevant to a query (hybrid dense + keyword search, RRF fusion)."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    project: str | None = Field(None, pattern=PROJECT_PATTERN)
    limit: int = Field(10, ge=1, le=MAX_RECALL_LIMIT)
    mode: RecallMode = RecallMode.HYBRID


class MemoryView(BaseModel):
    id: UUID
    project: str
    content: str
    category: Category | None = None
    memory_key: str | None = None
    importance: int
    confidence: float
    source: str
    version: int
    status: MemoryStatus
    created_at: datetime
    updated_at: datetime


class RecallHit(BaseModel):
    memory: MemoryView
    score: float


class RecallResult(BaseModel):
    hits: list[RecallHit]


COMMANDS: dict[str, type[BaseModel]] = {"save_memory": SaveMemory, "forget_memory": ForgetMemory}
QUERIES: dict[str, type[BaseModel]] = {"recall": Recall}
