"""Questions that join two things, taken apart into the questions each part asks.

A question like "What subject have Caroline and Melanie both painted?" needs a memory about each
person; one search for the whole question tends to fill its first places with one of them. The
rules below rewrite such a question into sub-questions that each name one of the joined things;
recall searches each and fuses the lists (:mod:`services.memory.search.hops`). Pure functions,
English only (any other question yields nothing, and is searched as it is):

* **two names joined** ("Caroline and Melanie", "both Jean and John"): one sub-question per name,
  the other name and "both" / "together" / "each" left out;
* **a list of things** ("her friends, family, and mentors", "pets and hobbies"): one sub-question
  per item, the rest of the question kept;
* **before / after an event** ("… go on a hike after the roadtrip?"): the question without the
  anchor ("… go on a hike") and the anchor with the question's subject ("Melanie the roadtrip");
  an anchor that is a date ("before August 3, 2023") is left alone — the date is the filter;
* **the one who …** ("the friend who wrote Deborah the motivational quote"): the relative clause
  as a question of its own.
"""

from __future__ import annotations

import re

from services.memory.domain.keywords import STOPWORDS

__all__ = ["MAX_SUBQUESTIONS", "split_question"]

#: At most this many sub-questions per question (each costs a search).
MAX_SUBQUESTIONS = 3

_NAME = r"[A-Z][a-z]+(?:'s)?"
_TWO_NAMES = re.compile(rf"\b(?:both\s+)?({_NAME})\s+and\s+({_NAME})\b(\s+(?:both|together|each))?")
_JOINERS = re.compile(r"\s+\b(?:both|together|each other|each)\b", re.IGNORECASE)
_WORD = r"[a-z][a-z'-]+"
_LIST = re.compile(rf"\b({_WORD})((?:,\s+{_WORD})*),?\s+(?:and|or)\s+({_WORD})\b")
_ANCHOR = re.compile(r"\b(before|after)\s+(.+?)\s*[?.!]*$", re.IGNORECASE)
_WHO = re.compile(
    r"\b(the|a|an)\s+(\w+)\s+(who)\s+(.+?)(?=\s+(?:is|was|are|were|no|not|still|never)\b|[?.!]*$)", re.IGNORECASE
)
_MONTHS = (
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec yesterday today tomorrow week weekend month year"
)
_DATE_WORDS = frozenset(_MONTHS.split())
_QUESTION_WORDS = frozenset("what when where which who whom whose why how is are was were do does did can could".split())


def _tidy(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip(" ,")
    return text if text.endswith(("?", ".", "!")) else text + "?"


def _is_date(anchor: str) -> bool:
    words = re.findall(r"[a-z]+|\d+", anchor.casefold())
    return any(w.isdigit() or w in _DATE_WORDS for w in words)


def _subject(question: str) -> str | None:
    """The first capitalised word that does not open the question (usually who it is about)."""
    for i, match in enumerate(re.finditer(r"\b[A-Z][a-z]+\b", question)):
        if i == 0 and match.start() == 0 and match.group().casefold() in _QUESTION_WORDS:
            continue
        return match.group()
    return None


def _split_names(question: str) -> list[str]:
    match = _TWO_NAMES.search(question)
    if match is None:
        return []
    first, second = match.group(1), match.group(2)
    if first.casefold() in _QUESTION_WORDS or first == second:
        return []
    out = []
    for name in (first, second):
        text = question[: match.start()] + name + question[match.end():]
        out.append(_tidy(_JOINERS.sub("", text)))
    return out


def _split_list(question: str) -> list[str]:
    match = _LIST.search(question)
    if match is None:
        return []
    items = [match.group(1), *(p.strip() for p in match.group(2).split(",") if p.strip()), match.group(3)]
    # every item must say something (not "up and running", "do and did"): its last word no stop-word
    if any(item.split()[-1] in STOPWORDS or item.split()[0] in STOPWORDS for item in items):
        return []
    return [_tidy(question[: match.start()] + item + question[match.end():]) for item in items]


def _split_anchor(question: str) -> list[str]:
    match = _ANCHOR.search(question)
    if match is None or _is_date(match.group(2)):
        return []
    main = question[: match.start()].strip()
    if len(main.split()) < 3:
        return []
    subject = _subject(question)
    anchor = match.group(2)
    return [_tidy(main), _tidy(f"{subject} {anchor}" if subject and subject not in anchor else anchor)]


def _split_who(question: str) -> list[str]:
    match = _WHO.search(question)
    if match is None:
        return []
    clause = f"{match.group(2)} {match.group(3)} {match.group(4)}"
    rest = question[: match.start()] + f"{match.group(1)} {match.group(2)}" + question[match.end():]
    return [_tidy(clause), _tidy(rest)]


def split_question(question: str) -> list[str]:
    """The sub-questions of ``question`` (at most :data:`MAX_SUBQUESTIONS`, each different from
    it and from each other), or ``[]`` when no rule applies. The first rule that applies wins:
    two names, the one who, before / after, a list."""
    text = question.strip()
    for rule in (_split_names, _split_who, _split_anchor, _split_list):
        parts = [p for p in dict.fromkeys(rule(text)) if p.rstrip("?") != text.rstrip("?")]
        if len(parts) >= 2:
            return parts[:MAX_SUBQUESTIONS]
    return []
