"""The order recall gives its candidates: a linear ranker over what each candidate's scores, words
and neighbours say (issue 34).

Late interaction leaves recall with its best candidates (50) and two scores for each: the hybrid
search's and late interaction's (MaxSim). Fusing their ranks, as recall did, uses nothing else we
know about a candidate. On LoCoMo the evidence a question needs is among the 50 far more often
than it is in the first 5 (R@5 0.74, with a perfect order of the same 50: 0.90): what is missing is
the order. This module scores each candidate by a weighted sum of *features*:

* **its scores**: the late and search scores, each against the best candidate's (in units of the
  question's spread), and the ranks of both and of their fusion;
* **its words**: is it about the person the question names (a turn's speaker label, else the names
  it mentions: :mod:`services.memory.domain.entities`), or about someone else; is it itself a
  question (a question rarely holds the answer); how long it is; does it quote a title, name
  someone the question does not, hold a number, say when ("last week"), for a question that asks
  "when";
* **its neighbours among the candidates**: the conversation it was said in (candidates said within
  :data:`SESSION_GAP` of each other), how good the best candidate of that conversation is and how
  far below it this one is, how many candidates came from it; whether the message it answers (its
  ``context``) is a candidate too, and how good, and whether it answers a question.

The weights (:data:`WEIGHTS`) are fitted, not chosen: ``bench/fit_order.py`` fits them by pairwise
logistic regression (each evidence candidate against each other candidate of its question) on
LoCoMo conversations 0–4, all five question categories, and reports them on conversations 5–9,
which they never saw (docs/recall-quality.md, "The learned order"). Nothing here reads the
network or a file: pure functions over the candidates' texts, times and scores.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from services.memory.domain.entities import memory_body, memory_subjects, names_in, question_entities

__all__ = [
    "FEATURES",
    "FEATURE_CHARS",
    "ORDER_RANK_K",
    "SESSION_GAP",
    "WEIGHTS",
    "Candidate",
    "candidate_features",
    "learned_order",
]

#: Candidates said within this long of each other (each to the next, in time) are one conversation.
SESSION_GAP = timedelta(minutes=30)
#: A candidate's score in the answer: ``(ORDER_RANK_K + 1) / (ORDER_RANK_K + rank)``, ranks from
#: 1 — a rank score in (0, 1], 1 for the first, on the same scale as the fused scores before it.
ORDER_RANK_K = 10
#: The most of a memory's text the features read (its start; of its context, the end, nearest the
#: memory), so that 50 documents of 200,000 characters cost what 50 chat turns do (316 ms of CPU
#: unbounded). LoCoMo's longest turn is 496 characters: the fitted figures do not move.
FEATURE_CHARS = 1_000
#: What a missing neighbour's score counts as (in units of the question's spread below the best).
_ABSENT = -5.0
_QUOTE = re.compile(r"[\"“”]")
_DIGIT = re.compile(r"\d")
#: Words that say when, matched in lower case (faster than re.IGNORECASE, the same for these words).
_WHEN_WORDS = re.compile(r"\b(?:yesterday|last|ago|next|weeks?|months?|years?|today|tomorrow|weekend|since|recently|just)\b")


@dataclass(frozen=True, slots=True)
class Candidate:
    """One of recall's candidates, as the order reads it."""

    content: str
    context: str | None
    said_at: datetime
    search_score: float
    late_score: float


#: The features, in the order :func:`candidate_features` gives them.
FEATURES: tuple[str, ...] = (
    "first_place",            # 1 / (1 + fused rank): the fusion of late interaction and search, ranks from 0
    "fused_rank",             # 1 / (10 + fused rank)
    "fused_rank_log",         # ln(1 + fused rank)
    "late",                   # late score minus the best, over the spread of the late scores
    "search",                 # search score minus the best, over the spread of the search scores
    "search_rank",            # 1 / (10 + rank by the search score)
    "late_rank",              # 1 / (10 + rank by the late score)
    "about_asked",            # about someone the question names
    "about_other",            # the question names someone; this is about someone else
    "is_question",            # its words end with a question mark
    "asks",                   # its words hold a question mark
    "length",                 # ln(1 + words)
    "quotes",                 # it quotes something (a title, a saying)
    "names_other",            # it names someone or something the question does not
    "number",                 # it holds a digit
    "session_size",           # ln(candidates said in its conversation)
    "session_best",           # the best "late" among its conversation's candidates
    "below_session_best",     # its "late" minus that best
    "follows_candidate",      # the message it answers is a candidate too
    "follows_late",           # that candidate's "late" (or -5)
    "answers_question",       # the message it answers ends with a question mark
    "context_names_asked",    # the message it answers names someone the question names
    "follows_session_best",   # the message it answers is its conversation's best candidate
    "answered",               # a candidate answers it (its words are another candidate's context)
    "says_when_asked_when",   # it says when ("last week") and the question asks "when"
    "says_when",              # it says when
    "about_asked_what",       # about_asked, for a question that asks "what"
    "quotes_what",            # quotes, for a question that asks "what"
    "names_other_who_what",   # names_other, for a question that asks "who" or "what"
)

#: Fitted by ``bench/fit_order.py`` on LoCoMo conversations 0–4 (pairwise logistic regression over
#: each question's candidates, categories 1–5), in the units the features come in.
#: Only differences between a question's candidates count: a feature equal for all of them (a
#: question's own traits) moves none. ``fused_rank`` is negative because ``search_rank`` and
#: ``late_rank`` carry the same ranks more precisely.
WEIGHTS: Mapping[str, float] = {
    "first_place": 0.9435,
    "fused_rank": -8.859,
    "fused_rank_log": 0.207,
    "late": 0.6289,
    "search": -0.07169,
    "search_rank": 21.26,
    "late_rank": 25.27,
    "about_asked": 0.4406,
    "about_other": -0.4505,
    "is_question": -0.8886,
    "asks": -0.1187,
    "length": 0.00745,
    "quotes": 0.4778,
    "names_other": 0.3741,
    "number": 0.1654,
    "session_size": 0.3049,
    "session_best": 0.567,
    "below_session_best": -0.06138,
    "follows_candidate": -1.561,
    "follows_late": 0.5172,
    "answers_question": 0.5285,
    "context_names_asked": -0.2944,
    "follows_session_best": -0.1419,
    "answered": 0.6169,
    "says_when_asked_when": 0.6098,
    "says_when": 0.5984,
    "about_asked_what": -0.0471,
    "quotes_what": 0.9767,
    "names_other_who_what": -0.5982,
}


def _spread_scores(values: Sequence[float]) -> list[float]:
    """Each value minus the best, over the values' standard deviation (0 for the best)."""
    best = max(values)
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return [(v - best) / (sd + 1e-6) for v in values]


def _ranks(values: Sequence[float]) -> list[int]:
    """Each value's rank from 0, best (highest) first; equal values in their given order."""
    ranks = [0] * len(values)
    for rank, i in enumerate(sorted(range(len(values)), key=lambda i: -values[i])):
        ranks[i] = rank
    return ranks


def _text_key(text: str) -> tuple[int, str]:
    """A text's length and start: what finds an equal text without hashing all of it."""
    return len(text), text[:64]


def _sessions(times: Sequence[datetime]) -> list[int]:
    """A conversation number for each time: times within :data:`SESSION_GAP` of the previous
    one (in time order) share one."""
    order = sorted(range(len(times)), key=lambda i: times[i])
    session = [0] * len(times)
    current = 0
    for previous, i in zip([None, *order], order, strict=False):
        if previous is not None and times[i] - times[previous] > SESSION_GAP:
            current += 1
        session[i] = current
    return session


def candidate_features(question: str, candidates: Sequence[Candidate]) -> list[list[float]]:
    """The :data:`FEATURES` of each of ``candidates`` (given in the fused order of late
    interaction and search, best first) for ``question``."""
    if not candidates:
        return []
    asked = question_entities(question)
    q = question.strip().casefold()
    asks_what, asks_when, asks_who = q.startswith("what"), q.startswith("when"), q.startswith("who")
    late = _spread_scores([c.late_score for c in candidates])
    search = _spread_scores([c.search_score for c in candidates])
    late_rank = _ranks([c.late_score for c in candidates])
    search_rank = _ranks([c.search_score for c in candidates])
    session = _sessions([c.said_at for c in candidates])
    size: dict[int, int] = {}
    best: dict[int, float] = {}
    for s, score in zip(session, late, strict=True):
        size[s] = size.get(s, 0) + 1
        best[s] = max(best.get(s, -math.inf), score)
    # which candidate's text is which one's context: looked up by length and start (hashing whole
    # documents would read every character of each), then compared whole
    by_text: dict[tuple[int, str], list[int]] = {}
    by_context: dict[tuple[int, str], list[int]] = {}
    for i, c in enumerate(candidates):
        by_text.setdefault(_text_key(c.content), []).append(i)
        if c.context:
            by_context.setdefault(_text_key(c.context), []).append(i)
    names: dict[str, frozenset[str]] = {}  # a context is often another candidate's text: read once

    def named(text: str) -> frozenset[str]:
        found = names.get(text)
        if found is None:
            found = names[text] = names_in(text)
        return found

    rows = []
    for rank, c in enumerate(candidates):
        text = c.content[:FEATURE_CHARS]
        context = c.context[-FEATURE_CHARS:] if c.context else ""
        body = memory_body(text)
        subjects = memory_subjects(text)
        about_asked = bool(asked & subjects)
        quoted = bool(_QUOTE.search(body))
        names_other = not named(body) <= asked
        says_when = bool(_WHEN_WORDS.search(body.lower()))
        follows = next((j for j in by_text.get(_text_key(c.context), ()) if candidates[j].content == c.context),
                       None) if c.context else None
        rows.append([
            1.0 / (1 + rank),
            1.0 / (10 + rank),
            math.log1p(rank),
            late[rank],
            search[rank],
            1.0 / (10 + search_rank[rank]),
            1.0 / (10 + late_rank[rank]),
            float(about_asked),
            float(bool(asked) and bool(subjects) and not about_asked),
            float(body.rstrip().endswith("?")),
            float("?" in body),
            math.log1p(len(body.split())),
            float(quoted),
            float(names_other),
            float(bool(_DIGIT.search(body))),
            math.log(size[session[rank]]),
            best[session[rank]],
            late[rank] - best[session[rank]],
            float(follows is not None),
            late[follows] if follows is not None else _ABSENT,
            float(context.rstrip().endswith("?")),
            float(bool(asked) and bool(context) and bool(asked & named(context))),
            float(follows is not None and late[follows] == best[session[rank]]),
            float(any(candidates[j].context == c.content for j in by_context.get(_text_key(c.content), ()))),
            float(says_when and asks_when),
            float(says_when),
            float(about_asked and asks_what),
            float(quoted and asks_what),
            float(names_other and (asks_who or asks_what)),
        ])
    return rows


def learned_order(
    question: str, candidates: Sequence[Candidate], weights: Mapping[str, float] = WEIGHTS,
) -> list[tuple[int, float]]:
    """``(position, score)`` of each of ``candidates`` (in the fused order, best first), best first
    by the weighted sum of their :func:`candidate_features`; equal sums keep the fused order. The
    score is the new rank's (:data:`ORDER_RANK_K`), in (0, 1]."""
    used = [(i, w) for i, name in enumerate(FEATURES) if (w := weights.get(name, 0.0))]
    sums = [sum(row[i] * w for i, w in used) for row in candidate_features(question, candidates)]
    order = sorted(range(len(sums)), key=lambda i: (-sums[i], i))
    return [(i, (ORDER_RANK_K + 1) / (ORDER_RANK_K + rank)) for rank, i in enumerate(order, start=1)]
