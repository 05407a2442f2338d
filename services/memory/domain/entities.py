"""Who or what a memory is about, and what a question asks about, as deep recall matches them
(offline rules).

A name is a capitalised word that does not open a question ("What", "When", …) — "Caroline",
"Sweden", "Biscuit" — compared case-folded, a possessive ``'s`` left off. A memory is **about** the
person its leading label names when it has one (``"Caroline: I went …"``, how a conversation turn
is saved: the speaker's "I" is that person, and the other names in the turn are mostly whom they
talk to), else about the names it mentions ("Caroline went to a support group", what an assistant
or the extractor writes). On LoCoMo conversations 0–4 the label alone did better than the label
with every name of the turn (deep recall R@5 0.750 against 0.745, docs/recall-quality.md).
Pure functions, computed from the text when recall needs them (a memory's content is in every
search hit), so there is no index to keep in step with the event log.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable
from typing import TypeVar

__all__ = ["entity_ranking", "memory_body", "memory_subjects", "names_in", "question_entities"]

_NAME = re.compile(r"\b([A-Z][a-z]+)(?:['’]s)?\b")
_LABEL = re.compile(r"^\s*([^:\n]{1,40}):\s")
_NOT_NAMES = frozenset(
    """what when where which who whom whose why how is are was were do does did can could would will
    should shall may might has have had according in on at after before during since for from the a an
    and or but if did i my me we our you your yes no answer""".split()
)
_K = TypeVar("_K", bound=Hashable)


def _names(text: str) -> set[str]:
    return {name.casefold() for name in _NAME.findall(text)}


def names_in(text: str) -> frozenset[str]:
    """The names ``text`` mentions (case-folded), question words and the like left out."""
    return frozenset(_names(text) - _NOT_NAMES)


def memory_body(content: str) -> str:
    """A memory's words without its leading label (``"Caroline: I went …"`` → ``"I went …"``)."""
    label = _LABEL.match(content)
    return content[label.end():] if label is not None else content


def question_entities(question: str) -> frozenset[str]:
    """The names a question asks about (case-folded), question words and the like left out."""
    return frozenset(n for n in _names(question) if n not in _NOT_NAMES)


def memory_subjects(content: str) -> frozenset[str]:
    """Whom a memory is about: the person its leading label names, or else the names it mentions."""
    label = _LABEL.match(content)
    if label is not None:
        return frozenset(label.group(1).casefold().split()) - _NOT_NAMES
    return names_in(content)


def entity_ranking(question: str, ranked: Iterable[tuple[_K, str]]) -> list[_K]:
    """Of ``ranked`` (``(key, content)``, best first), those about one of the things ``question``
    names (:func:`memory_subjects`), in the same order; ``[]`` when the question names nothing."""
    wanted = question_entities(question)
    if not wanted:
        return []
    return [key for key, content in ranked if wanted & memory_subjects(content)]
