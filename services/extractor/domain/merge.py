"""How an extracted fact meets what is already known, and the identities that make a re-run a no-op.

- A fact with a slot key (``profile.location``) addresses that slot; a statement without one gets a
  key of its own derived from its words and a digest (``profile.went_rome_once_3f2a9c``), so the
  same statement extracted again lands on the same memory and different statements never collide.
- Same key, near-duplicate content → nothing written; same key, other content → a new version
  (the memory service keeps the old one in history with ``valid_until``); no memory → saved.
- Every command carries an idempotency key derived from ``(log_id, task_id, fact)``: a redelivery,
  a crash mid-task or a second replica re-sends the same keys, and the memory service answers them
  with their first outcome instead of acting twice.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum

from contracts.memory import NAMESPACE_FOR_CATEGORY
from services.extractor.domain.model import Fact
from services.extractor.domain.text import content_words, slug

NEAR_DUPLICATE = 0.8


class Action(StrEnum):
    SAVE = "save"
    UPDATE = "update"
    KEEP = "keep"  # what is known already says it


def _digest(*parts: str, size: int = 40) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:size]


def memory_key_of(fact: Fact) -> str:
    """The key a fact is saved under: its slot, or a key of its own statement."""
    if fact.memory_key:
        return fact.memory_key
    namespace = NAMESPACE_FOR_CATEGORY[fact.category]
    words = slug(fact.content, 4)[:50].strip("_")
    digest = _digest(fact.content.casefold().strip(), size=6)
    return f"{namespace}.{words}_{digest}" if words else f"{namespace}.s_{digest}"


def similarity(a: str, b: str) -> float:
    """Share of the shorter text's content words found in the other (1.0 for equal texts)."""
    if a.strip().casefold() == b.strip().casefold():
        return 1.0
    x, y = set(content_words(a)), set(content_words(b))
    if not x or not y:
        return 0.0
    return len(x & y) / min(len(x), len(y))


def decide(fact: Fact, known_content: str | None) -> Action:
    """Save, update or keep, given the content now stored under the fact's key (None: nothing)."""
    if known_content is None:
        return Action.SAVE
    if similarity(fact.content, known_content) >= NEAR_DUPLICATE:
        return Action.KEEP
    return Action.UPDATE


def fact_key(log_id: str, task_id: str, fact: Fact, action: str) -> str:
    """The idempotency key of one fact's write (IDEMPOTENCY_KEY_PATTERN: 8-128 of [A-Za-z0-9_.:-])."""
    return "x:" + _digest(log_id, task_id, memory_key_of(fact), fact.content, action)


def step_key(step: str, log_id: str, task_id: str, attempt: int | str = 0) -> str:
    """The idempotency key of one lifecycle step of a task (claim, result, processed, failed)."""
    return f"x:{step}:" + _digest(log_id, task_id, str(attempt), size=32)
