"""Consolidation: near-duplicate memories of one key family, merged into one.

Extraction merges a fact only with the memory under its own key, so the same thing said on two days
in other words ("Ana went to the climbing gym again" / "Ana went to the climbing gym with Leo")
becomes two memories. A **key family** is the memories whose keys differ only by the digest the
extractor appends to a statement's words (``profile.ana_went_climbing_gym_3f2a9c`` and
``…_9b01de``); a slot key (``profile.location``) is a family of one. Within a family (and a
project), memories whose contents are near-duplicates both ways (:func:`same`)
form a cluster; the survivor is the one said last (then the more important, then the older id),
and each other member is merged into it (the memory service's ``MergeMemory``: the survivor takes
its sayings, when and where each was said, and the higher importance; the member is forgotten with
a reason naming the survivor). Both are versioned events on the log: no history is deleted, and
``unmerge_memory`` undoes a merge.

The memory service already folds most such repeats as they are extracted (it judges each extracted
fact like a save); this round is the backstop for what that lets through.

Only what the extractor wrote (``source == "extractor"``) and is active is considered; what a
person or an assistant saved is never merged away.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from uuid import UUID

from services.extractor.domain.merge import NEAR_DUPLICATE
from services.extractor.domain.text import content_words

_DIGEST = re.compile(r"_[0-9a-f]{6}$")


@dataclass(frozen=True)
class Held:
    """A memory as consolidation reads it."""

    id: UUID
    project: str
    memory_key: str | None
    content: str
    importance: int
    as_of: date  # its log's date (else the day it was last written)


@dataclass(frozen=True)
class Merge:
    memory: Held
    survivor: Held

    @property
    def reason(self) -> str:
        return f"consolidated: a near-duplicate ({self.memory.memory_key} / {self.survivor.memory_key})"


@dataclass
class Plan:
    merge: list[Merge] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.merge)


def same(a: str, b: str) -> bool:
    """Near-duplicates both ways: the shared content words are ≥ ``NEAR_DUPLICATE`` of each text's
    (stricter than the extraction merge's share of the shorter text: a short statement contained in
    a longer one is not the same memory)."""
    x, y = set(content_words(a)), set(content_words(b))
    if not x or not y:
        return a.strip().casefold() == b.strip().casefold()
    return len(x & y) / max(len(x), len(y)) >= NEAR_DUPLICATE


def family_of(memory_key: str | None) -> str | None:
    """The key without the digest of its statement (a slot key is its own family)."""
    if not memory_key:
        return None
    return _DIGEST.sub("", memory_key)


def plan(memories: list[Held]) -> Plan:
    """What to merge: per (project, family), clusters of near-duplicates → one survivor each."""
    families: dict[tuple[str, str], list[Held]] = {}
    for memory in memories:
        family = family_of(memory.memory_key)
        if family is not None:
            families.setdefault((memory.project, family), []).append(memory)
    out = Plan()
    for members in families.values():
        if len(members) < 2:
            continue
        # the latest said first: it survives what it duplicates
        ordered = sorted(members, key=lambda m: (m.as_of, m.importance, str(m.id)), reverse=True)
        taken: set[UUID] = set()
        for head in ordered:
            if head.id in taken:
                continue
            cluster = [m for m in ordered if m.id not in taken and m.id != head.id
                       and same(head.content, m.content)]
            if not cluster:
                continue
            taken.add(head.id)
            taken.update(m.id for m in cluster)
            out.merge.extend(Merge(m, head) for m in cluster)
    return out
