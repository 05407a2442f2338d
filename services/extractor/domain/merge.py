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
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import date
from enum import StrEnum

from contracts.memory import NAMESPACE_FOR_CATEGORY
from services.extractor.domain.engine import USER_SPEAKERS, is_assistant
from services.extractor.domain.model import Fact
from services.extractor.domain.text import content_words, slug

NEAR_DUPLICATE = 0.8


class Action(StrEnum):
    SAVE = "save"
    UPDATE = "update"
    KEEP = "keep"  # what is known already is newer: nothing to write
    REPEAT = "repeat"  # what is known already says it: counted as said again (the memory's sources)


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


_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")


def numbers(text: str) -> list[str]:
    """The numbers a text states, in order."""
    return _NUMBER.findall(text)


#: When a fact was said, for ordering the versions of a slot: (day, turn index in its log).
AsOf = tuple[date, int]


def decide(fact: Fact, known_content: str | None, said: AsOf | None = None, known: AsOf | None = None) -> Action:
    """Save, update or keep, given the content now stored under the fact's key (None: nothing).

    With ``said`` (when the fact was said) and ``known`` (when the stored content was), a fact older
    than what is stored does not replace it (KEEP): the current value of a slot is the latest said,
    whatever order the logs are extracted in."""
    if known_content is None:
        return Action.SAVE
    if similarity(fact.content, known_content) >= NEAR_DUPLICATE and numbers(fact.content) == numbers(known_content):
        return Action.REPEAT  # (another number is another value: "has 1 kid" / "now has 2 kids")
    if said is not None and known is not None and said < known:
        return Action.KEEP
    return Action.UPDATE


def as_of(fact: Fact, log_date: date) -> AsOf:
    """When a fact was said: its turn's day (``at``), else its log's date; then its turn's index."""
    day = fact.at.date() if fact.at is not None else log_date
    turns = [int(r.partition(":")[2]) for r in fact.turn_refs if r.startswith("turn:") and r[5:].isdigit()]
    return day, min(turns) if turns else -1


def turn_indices(refs: tuple[str, ...]) -> list[int]:
    """``turn:<i>`` refs as indices, in order, once each (``field:<name>`` refs name no turn)."""
    found: list[int] = []
    for ref in refs:
        kind, _, index = ref.partition(":")
        if kind == "turn" and index.isdigit() and int(index) not in found:
            found.append(int(index))
    return found


def person_keys(facts: Sequence[Fact], people: Sequence[str]) -> list[Fact]:
    """Slots per person: in a log where several people speak, a slot fact of a named speaker is keyed
    to them (``profile.occupation`` said by Caroline → ``profile.caroline__occupation``), so one
    person's job never becomes another's version; the user's own slots (and those of a log's only
    person, the user) keep the plain key."""
    persons = {p.strip().casefold() for p in people if not is_assistant(p)} - {""}
    if len(persons) < 2:
        return list(facts)
    out = []
    for fact in facts:
        who = fact.speaker.strip().casefold()
        if not fact.memory_key or who in USER_SPEAKERS:
            out.append(fact)
            continue
        namespace, _, topic = fact.memory_key.partition(".")
        person = re.sub(r"[^a-z0-9]+", "_", who).strip("_")[:24].strip("_") or _digest(who, size=8)
        out.append(replace(fact, memory_key=f"{namespace}.{person}__{topic}"[: len(namespace) + 65].rstrip("_")))
    return out


def fact_key(log_id: str, task_id: str, fact: Fact, action: str, episode: int = 0) -> str:
    """The idempotency key of one fact's write (IDEMPOTENCY_KEY_PATTERN: 8-128 of [A-Za-z0-9_.:-]):
    the same within one pending episode of the log (a redelivery writes nothing twice), another in
    a later one (a re-queued or re-saved log's writes may carry other provenance; the merge policy,
    not the key, keeps them from duplicating what the first episode wrote)."""
    parts = (log_id, task_id, memory_key_of(fact), fact.content, action) + ((str(episode),) if episode else ())
    return "x:" + _digest(*parts)


def step_key(step: str, log_id: str, task_id: str, attempt: int | str = 0) -> str:
    """The idempotency key of one lifecycle step of a task (claim, result, processed, failed)."""
    return f"x:{step}:" + _digest(log_id, task_id, str(attempt), size=32)
