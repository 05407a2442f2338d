"""What extraction reads and what it produces: turns in, atomic facts with their provenance out."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from contracts.memory import Category


@dataclass(frozen=True)
class Turn:
    """One message of a day's conversation. ``ref`` names it for provenance: ``turn:<index>`` for a
    turn of the log's ``turns``, ``field:<name>`` for a structured field of the log."""

    speaker: str
    text: str
    ref: str
    at: datetime | None = None


@dataclass(frozen=True)
class Fact:
    """One atomic statement about a person of the conversation, classified and sourced.

    ``memory_key`` is set only when the fact is keyable (a slot a later fact of the same kind
    replaces: where the user lives, their favourite colour…); other facts are statements that
    stand on their own. ``turn_refs`` are the turns it came from (provenance)."""

    content: str
    category: Category
    importance: int
    confidence: float
    turn_refs: tuple[str, ...]
    speaker: str
    memory_key: str | None = None
    context: str | None = None
    at: datetime | None = None  # when it was said (the turn's ``at``), when the log gives it


@dataclass
class Extraction:
    """An engine's answer for one piece of a log; ``tokens`` is what an LLM engine spent."""

    facts: list[Fact] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    engine: str = ""
