"""Which candidate statements become memories: a small linear scorer of informativeness.

The engine proposes every statement a turn makes (first-person facts, and other statements a
speaker makes, as "<Name> says …"); most of them are conversation, not memory ("It was so fun",
"That's a great idea"). Each candidate is described by a few readable features of the speaker's
own words and of its turn, and a linear score decides: a candidate is kept when its score reaches
the engine's threshold. A keyed fact — one that fills a slot (where the user lives, their name…) or
names a preference, goal or skill (``preference.hiking``) — is always kept.

The weights were fitted (logistic regression, L2, Newton steps) on LoCoMo conversations 0–4 against
the question "does this candidate, as saved (first person resolved, relative dates resolved from the
session's date), restate one of LoCoMo's observations of its turn (token F1 ≥ 0.5)?" and checked on
conversations 5–9 (`bench/extraction.py` prints both halves). They are constants here: nothing is
learnt at run time, no model is loaded, the engine stays deterministic and pure Python.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from services.extractor.domain.text import FIRST_PERSON, SECOND_PERSON, content_words, is_hedged

_PRAISE = re.compile(r"\b(?:awesome|amazing|great|inspiring|proud of|cool|nice|wonderful|fantastic|incredible|"
                     r"beautiful|glad|happy for|so happy|impressive|impressed)\b", re.IGNORECASE)
_EMOTION = re.compile(r"\b(?:feel|feels|felt|excited|happy|fun|blast|stoked|thrilled)\b", re.IGNORECASE)
_EVENT = re.compile(r"\b(?:went|got|had|made|took|started|finished|bought|visited|joined|won|met|"
                    r"[a-z]{3,}ed)\b", re.IGNORECASE)
_DURABLE = re.compile(r"\b(?:love|loves|like|likes|enjoy|enjoys|work|works|live|lives|have|has|always|never|"
                      r"usually|favou?rite|want|wants|plan|plans|planning|dream|goal|passion\w*)\b", re.IGNORECASE)
_DEICTIC = re.compile(r"^(?:it|it's|that|that's|this|they|they're|there|there's)\b", re.IGNORECASE)
_NAME = re.compile(r"(?<=\s)[A-Z][a-z]+")
_NUMBER = re.compile(r"\d")
_WE = re.compile(r"\b(?:we|our|us)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Features:
    """What the scorer reads of one candidate (``said``: the speaker's words, interjections stripped)."""

    content: int  # content words of the sentence
    first_person: bool  # a statement about the speaker (else "<Name> says …")
    deictic: bool  # opens with it/that/this/they/there: leans on what came before
    names: int  # capitalised words after the first (people, places, titles)
    number: bool
    second_person: bool  # speaks about the listener
    first: bool  # the turn's first statement
    last: bool  # the turn's last statement
    statements: int  # statements in the turn
    turn_chars: int
    praise: bool  # a compliment or a reaction ("That's awesome")
    emotion: bool
    event: bool  # something done (a past-tense verb)
    durable: bool  # a lasting predicate (love, work, live, have, always…)
    hedged: bool
    exclaimed: bool
    answers: bool  # the turn answers a question
    we: bool
    echoed_before: float = 0.0  # share of its content words said in the turn before (the question it answers)
    echoed_after: float = 0.0  # ... in the turn after (what the listener picked up)
    topical: float = 0.0  # ... said elsewhere in the log (the day's topics)
    longest: bool = False  # the turn's statement with the most content words


def features(said: str, *, first: bool, last: bool, statements: int, turn_chars: int,
             answers: bool, before: frozenset[str] = frozenset(), after: frozenset[str] = frozenset(),
             said_elsewhere: frozenset[str] | None = None, longest: bool = False) -> Features:
    """The features of a statement as the speaker said it, within its turn."""
    words = set(content_words(said))
    return Features(
        content=len(content_words(said)), first_person=bool(FIRST_PERSON.search(said)),
        deictic=bool(_DEICTIC.match(said)), names=len(_NAME.findall(said)), number=bool(_NUMBER.search(said)),
        second_person=bool(SECOND_PERSON.search(said)), first=first, last=last, statements=statements,
        turn_chars=turn_chars, praise=bool(_PRAISE.search(said)), emotion=bool(_EMOTION.search(said)),
        event=bool(_EVENT.search(said)), durable=bool(_DURABLE.search(said)), hedged=is_hedged(said),
        exclaimed=said.rstrip().endswith("!"), answers=answers, we=bool(_WE.search(said)),
        echoed_before=_share(words, before), echoed_after=_share(words, after), topical=_share(words, said_elsewhere or frozenset()),
        longest=longest,
    )


def _share(words: set[str], other: frozenset[str]) -> float:
    return len(words & other) / len(words) if words else 0.0


def vector(f: Features) -> list[float]:
    """The features as the numbers the weights multiply (the order of ``WEIGHTS``)."""
    n = f.content
    return [
        1.0, math.log1p(n), float(n <= 2), float(3 <= n <= 5), float(6 <= n <= 9), float(n >= 10),
        float(f.first_person), float(f.deictic), float(min(f.names, 3)), float(f.number), float(f.second_person),
        float(f.first), float(f.last), math.log1p(f.statements), math.log1p(f.turn_chars), float(f.praise),
        float(f.emotion), float(f.event), float(f.durable), float(f.hedged), float(f.exclaimed), float(f.answers),
        float(f.we), f.echoed_before, f.echoed_after, f.topical, float(f.longest),
    ]


#: Fitted weights (see the module's docstring), in the order of ``vector``.
WEIGHTS: tuple[float, ...] = (
    -2.695, 1.024, -0.268, 0.006, 0.053, 0.208, 1.087, -0.330, 0.356, 0.953, -0.486, -0.035, -0.208, -0.564,
    -0.022, -0.240, -0.358, 0.162, -0.079, -0.697, -0.417, 0.295, -0.845, -0.294, 1.278, -0.661, 0.289,
)
#: The default threshold: about 1.47 memories per LoCoMo observation on the fitted half.
THRESHOLD = -1.29


def score(f: Features, weights: tuple[float, ...] = WEIGHTS) -> float:
    """The candidate's informativeness (a logit: above 0, more likely a memory than not)."""
    return sum(w * x for w, x in zip(weights, vector(f), strict=True))
