"""The built-in extraction engine: a day's conversation → atomic, classified facts, offline.

Per turn of a person (assistant turns are context only): split into sentences; drop questions,
greetings, thanks, reactions and filler; strip leading interjections; keep statements the speaker
makes about themselves (first person) or short subject-less reports ("Been to Rome once"); resolve
the first person to the speaker and "you" to the person spoken to; classify; drop near-duplicates
within the log. One sentence → at most one fact; each fact names the turn it came from.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from contracts.memory import Category
from services.extractor.domain.classify import classify, states_a_change
from services.extractor.domain.model import Fact, Turn
from services.extractor.domain.select import THRESHOLD, Features, features, score
from services.extractor.domain.text import (
    FIRST_PERSON,
    SECOND_PERSON,
    STOPWORDS,
    content_words,
    is_filler,
    is_question,
    resolve_first_person,
    resolve_second_person,
    sentences,
    strip_interjections,
    third_person,
    without_fluff,
)

ASSISTANT_SPEAKERS = frozenset({"assistant", "ai", "bot", "system", "model", "engram", "claude", "chatgpt", "gpt"})
USER_SPEAKERS = frozenset({"user", "me", "human", "i", "you"})
MAX_FACT_CHARS = 600
CONTEXT_CHARS = 400

#: Subject-less reports the speaker makes about themselves ("Been to Rome once", "Just got back").
_SUBJECTLESS = re.compile(
    r"^(?:just |finally |recently |also |still )*(?:been|went|got|started|finished|bought|visited|moved|"
    r"joined|signed up|tried|learned|made|took|had|spent|working|trying|planning|thinking|going|heading|"
    r"loving|enjoying|feeling|feel|love|can't wait|gonna|hoping|looking forward)\b",
    re.IGNORECASE,
)
_CONTINUATION = re.compile(r"^(?:it|it's|its|that|that's|this|this is|they|they're|which|plus|and|but|so|"
                           r"there|there's|he|she|he's|she's)\b", re.IGNORECASE)
_ABOUT_OTHER_ONLY = re.compile(r"^(?:you|your|you're|you've|u|ur)\b", re.IGNORECASE)
#: "Seattle is home now", "Mexico City is our home these days": a place named as the speaker's home
_HOME_NOW = re.compile(r"^([A-Z][\w'-]*(?: [A-Z][\w'-]*){0,3}) is (?:my |our )?home(?: now| these days)?[.!]?$")
_EMPTY_STATEMENT = re.compile(
    r"^(?:i (?:know|see|agree|understand|hear you|feel you|get it|bet|hope so|think so|mean|guess)|"
    r"i'm (?:glad|happy|sorry|so happy|so glad|so sorry) (?:to hear|for you|you)|i can't wait to (?:see|hear)|"
    r"i'll (?:keep that in mind|let you know|do that|try)|let me know|me too|i'm here for you|"
    r"i'm (?:sure|positive)|i'd love to (?:see|hear))\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class EngineSettings:
    min_content_words: int = 3
    duplicate_overlap: float = 0.8
    threshold: float = THRESHOLD  # the selector's bar (``domain/select.py``); -inf keeps every candidate


def display_name(speaker: str) -> str:
    """How a fact names its subject: "The user" for the user, else the speaker's own name."""
    clean = speaker.strip()
    if clean.lower() in USER_SPEAKERS or not clean:
        return "The user"
    return clean[:1].upper() + clean[1:]


def is_assistant(speaker: str) -> bool:
    return speaker.strip().lower() in ASSISTANT_SPEAKERS


def _listener(turns: Sequence[Turn], index: int) -> str | None:
    """The person a turn speaks to: the nearest other speaker around it."""
    me = turns[index].speaker
    for j in (index - 1, index + 1, index - 2, index + 2):
        if 0 <= j < len(turns) and turns[j].speaker != me:
            return turns[j].speaker
    return None


def statement_of(sentence: str, speaker: str, listener: str | None) -> str | None:
    """The sentence as an atomic statement about the speaker, or None when it states nothing."""
    if is_question(sentence) or is_filler(sentence):
        return None
    said = strip_interjections(sentence).strip()
    if not said or is_filler(said) or _EMPTY_STATEMENT.match(said):
        return None
    if _ABOUT_OTHER_ONLY.match(said) and not FIRST_PERSON.search(said):
        return None
    name = display_name(speaker)
    home = _HOME_NOW.match(said)
    if home:  # "Seattle is home now": where the speaker lives, said about the place
        return f"{name} lives in {home.group(1)} now."
    if _SUBJECTLESS.match(said):
        text = resolve_first_person(subjectless(said, name), name)
    elif FIRST_PERSON.search(said):
        text = resolve_first_person(said, name)
    else:
        return None
    if SECOND_PERSON.search(text):
        if listener is None or is_assistant(listener):
            return None
        text = resolve_second_person(text, display_name(listener))
    text = text.rstrip(" ,;:-")
    if not text.endswith((".", "!")):
        text += "."
    text = re.sub(r"!+$", ".", text)
    return text[:MAX_FACT_CHARS]


def subjectless(said: str, name: str) -> str:
    """A report without its subject, given one: "Been to Rome once" → "Ana has been to Rome once"."""
    first, _, rest = said.partition(" ")
    low = first.lower()
    if low == "been":
        verb = "has been"
    elif low == "gonna":
        verb = "is going to"
    elif low.endswith("ing"):
        verb = f"is {low}"
    elif low in ("just", "finally", "recently", "also", "still"):
        return f"{name} {low} {subjectless(rest, name).removeprefix(name + ' ')}" if rest else f"{name} {low}"
    else:
        verb = third_person(low)
    return f"{name} {verb} {rest}".strip()


def continuation(sentence: str) -> bool:
    """A sentence that only goes on about the one before it ("It was my first time")."""
    return bool(_CONTINUATION.match(strip_interjections(sentence)))


_CLAUSE = re.compile(r",?\s+(?:and|but|so|plus)\s+(?=(?:I|I'm|I've|I'll|I'd|my)\b)")
_STYLE_REQUEST = re.compile(
    r"^(?:please\s+)?((?:keep|make|be|use|don't use|do not use|answer|reply|respond|talk|explain|write|call me|"
    r"stop|avoid)\b.*)$", re.IGNORECASE)


def clauses(sentence: str) -> list[str]:
    """A sentence cut where a new first-person clause begins ("I live in Lyon and I work as a nurse")."""
    return [c.strip() for c in _CLAUSE.split(sentence) if c.strip()]


def style_request(sentence: str, speaker: str, listener: str | None) -> str | None:
    """A request about how the assistant should talk, as a fact about the user's preferred style."""
    if listener is None or not is_assistant(listener) or is_question(sentence):
        return None
    match = _STYLE_REQUEST.match(strip_interjections(sentence).rstrip(" .!"))
    if not match:
        return None
    wish = resolve_second_person(resolve_first_person(match.group(1), display_name(speaker)), "the assistant")
    return f"{display_name(speaker)} asked the assistant to {wish[:1].lower()}{wish[1:]}."


def _overlap(a: set[str], b: set[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


@dataclass(frozen=True)
class Candidate:
    """A statement the engine could keep, with what the selector reads of it."""

    fact: Fact
    features: Features
    slot: bool  # keyed: fills a slot (location, favourite colour…) or names a preference, goal or skill; or
    # says one of the speaker's facts changed or ended ("I no longer eat meat"): always kept

    @property
    def score(self) -> float:
        return score(self.features)


def reported(sentence: str, speaker: str, listener: str | None) -> str | None:
    """A statement the speaker makes that is not about themselves, as "<Name> says …" ("Boston's
    music scene is awesome" by Dave → "Dave says Boston's music scene is awesome.")."""
    if is_question(sentence) or is_filler(sentence):
        return None
    said = strip_interjections(sentence).strip().rstrip(" ,;:-")
    if not said or is_filler(said) or _EMPTY_STATEMENT.match(said) or FIRST_PERSON.search(said):
        return None
    if len(content_words(said)) < 3:
        return None
    first = said.split(" ", 1)[0]
    common = first.lower() in STOPWORDS or first.lower().removesuffix("'s").endswith("ing")
    text = f"{display_name(speaker)} says {said[:1].lower() if common else said[:1]}{said[1:]}"
    if SECOND_PERSON.search(text):
        if listener is None or is_assistant(listener):
            return None
        text = resolve_second_person(text, display_name(listener))
    return (text.rstrip(" .!") + ".")[:MAX_FACT_CHARS]


class BuiltinEngine:
    """Rules only: no model, no network, deterministic (the same log always gives the same facts)."""

    name = "builtin"

    def __init__(self, settings: EngineSettings | None = None) -> None:
        self.settings = settings or EngineSettings()

    def extract(self, turns: Sequence[Turn]) -> list[Fact]:
        """The facts worth remembering that the turns state about their speakers, in conversation
        order: every candidate statement, the informative ones kept (``domain/select.py``), near-
        duplicates within the log dropped."""
        kept = [c for c in self.candidates(turns) if c.slot or c.score >= self.settings.threshold]
        return self.unique([c.fact for c in kept])

    def unique(self, facts: Sequence[Fact]) -> list[Fact]:
        """The facts without near-duplicates of an earlier fact about the same person."""
        out: list[Fact] = []
        seen: dict[str, list[set[str]]] = {}
        for fact in facts:
            name = display_name(fact.speaker)
            tokens = set(content_words(fact.content)) - set(content_words(name))
            earlier = seen.setdefault(name, [])
            if any(_overlap(tokens, other) >= self.settings.duplicate_overlap for other in earlier):
                continue
            earlier.append(tokens)
            out.append(fact)
        return out

    def candidates(self, turns: Sequence[Turn]) -> list[Candidate]:
        """Every statement the turns make, as a fact with the selector's features."""
        out: list[Candidate] = []
        vocab = [frozenset(content_words(t.text)) for t in turns]
        used = Counter(w for words in vocab for w in words)
        for index, turn in enumerate(turns):
            if is_assistant(turn.speaker) or not turn.text.strip():
                continue
            out.extend(self._turn(turns, index, vocab, used))
        return out

    def _turn(self, turns: Sequence[Turn], index: int, vocab: Sequence[frozenset[str]],
              used: Counter[str]) -> list[Candidate]:
        turn = turns[index]
        listener = _listener(turns, index)
        context = self._context(turns, index)
        name = display_name(turn.speaker)
        found: list[tuple[Fact, str, bool]] = []  # fact, the speaker's words, fills a slot
        last: int | None = None
        for sentence in (c for s in sentences(turn.text) for c in clauses(s)):
            if last is not None and continuation(sentence) and not is_question(sentence):
                merged = self._continue(found[last][0], sentence, turn.speaker, listener)
                if merged is not None:
                    found[last] = (merged, found[last][1], found[last][2])
                    continue
            text = statement_of(sentence, turn.speaker, listener)
            request = style_request(sentence, turn.speaker, listener) if text is None else None
            said = strip_interjections(sentence)
            if text is None and request is None:
                text = reported(sentence, turn.speaker, listener)
                if text is None:
                    last = None
                    continue
                kind = classify(said)
                kind = replace(kind, topic=None, confidence=round(max(0.1, kind.confidence - 0.1), 2))
            else:
                kind = classify(said)
                if request is not None:
                    text = request
                    kind = replace(kind, category=Category.CONVERSATION_STYLE,
                                   topic=kind.topic if kind.category is Category.CONVERSATION_STYLE else None)
            assert text is not None
            tokens = set(content_words(text)) - set(content_words(name))
            kept = kind.topic is not None or states_a_change(said)
            if len(tokens) < (1 if kept else self.settings.min_content_words):
                last = None
                continue
            found.append((Fact(
                content=without_fluff(text), category=kind.category, importance=kind.importance, confidence=kind.confidence,
                turn_refs=(turn.ref,), speaker=turn.speaker, memory_key=kind.memory_key, context=context,
                at=turn.at,
            ), said, kept))
            last = len(found) - 1
        answers = index > 0 and "?" in turns[index - 1].text
        n = len(found)
        before = vocab[index - 1] if index else frozenset()
        after = vocab[index + 1] if index + 1 < len(vocab) else frozenset()
        own = vocab[index]
        sizes = [len(content_words(said)) for _, said, _ in found]
        elsewhere = [frozenset(w for w in content_words(said) if used[w] > (w in own)) for _, said, _ in found]
        return [
            Candidate(fact, features(said, first=i == 0, last=i == n - 1, statements=n, turn_chars=len(turn.text),
                                     answers=answers, before=before, after=after, said_elsewhere=elsewhere[i],
                                     longest=sizes[i] == max(sizes)), slot)
            for i, (fact, said, slot) in enumerate(found)
        ]

    def _continue(self, fact: Fact, sentence: str, speaker: str, listener: str | None) -> Fact | None:
        """The fact with the sentence that goes on about it appended, when that says something."""
        said = strip_interjections(sentence).rstrip(" .!")
        if is_filler(said) or len(content_words(said)) < 2:
            return None
        text = resolve_first_person(said, display_name(speaker), mentioned=True)
        if SECOND_PERSON.search(text):
            if listener is None or is_assistant(listener):
                return None
            text = resolve_second_person(text, display_name(listener))
        text = without_fluff(text)
        joined = f"{fact.content.rstrip('.')}; {text[:1].lower()}{text[1:]}."
        if len(joined) > MAX_FACT_CHARS:
            return None
        return replace(fact, content=joined)

    @staticmethod
    def _context(turns: Sequence[Turn], index: int) -> str | None:
        if index == 0:
            return None
        before = turns[index - 1]
        text = f"{display_name(before.speaker)}: {before.text.strip()}"
        return text[-CONTEXT_CHARS:] if before.text.strip() else None


# input shapes ------------------------------------------------------------------------------------
_LINE = re.compile(r"^\s*([^:\n]{1,40}):\s+(.+)$")


def turns_from_text(text: str, default_speaker: str = "user") -> list[Turn]:
    """Plain text as turns: "Name: message" lines become that speaker's turns; other lines continue
    the previous turn (or are the user's when no speaker was named)."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _LINE.match(line)
        if match and len(match.group(1).split()) <= 3:
            out.append((match.group(1).strip(), match.group(2).strip()))
        elif out:
            out[-1] = (out[-1][0], out[-1][1] + "\n" + line.strip())
        else:
            out.append((default_speaker, line.strip()))
    return [Turn(speaker=s, text=t, ref=f"turn:{i}") for i, (s, t) in enumerate(out)]


def turns_from_fields(fields: Iterable[tuple[str, str | None]], speaker: str = "user") -> list[Turn]:
    """A log's structured fields (events, user_state, …) as the user's own turns, one per field."""
    return [Turn(speaker=speaker, text=value, ref=f"field:{name}") for name, value in fields if value and value.strip()]


def split_turns(turns: Sequence[Turn], max_chars: int) -> list[list[Turn]]:
    """Pieces of at most ``max_chars`` characters each, cut between turns (an overlong turn is cut
    between its sentences, each piece keeping the turn's ref): nothing is dropped."""
    pieces: list[list[Turn]] = []
    current: list[Turn] = []
    size = 0
    for turn in turns:
        parts = [turn] if len(turn.text) <= max_chars else _cut(turn, max_chars)
        for part in parts:
            if current and size + len(part.text) > max_chars:
                pieces.append(current)
                current, size = [], 0
            current.append(part)
            size += len(part.text)
    if current:
        pieces.append(current)
    return pieces


def _cut(turn: Turn, max_chars: int) -> list[Turn]:
    chunks: list[str] = []
    buffer = ""
    for sentence in sentences(turn.text) or [turn.text]:
        while len(sentence) > max_chars:
            chunks.append(sentence[:max_chars])
            sentence = sentence[max_chars:]
        if buffer and len(buffer) + 1 + len(sentence) > max_chars:
            chunks.append(buffer)
            buffer = ""
        buffer = f"{buffer} {sentence}".strip()
    if buffer:
        chunks.append(buffer)
    return [Turn(speaker=turn.speaker, text=c, ref=turn.ref, at=turn.at) for c in chunks]
