"""The people, places, pets and things a text names, as deep recall matches them (offline rules).

A name is a capitalised word that does not open a question ("What", "When", …) — "Caroline",
"Sweden", "Biscuit" — compared case-folded, a possessive ``'s`` left off. A memory's leading
label (``"Caroline: I went …"``, how a conversation turn is saved) names who it is about: the
speaker's "I" is that person. Pure functions, computed from the text when recall needs them (a
memory's content is in every search hit), so there is no index to keep in step with the event log.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable
from typing import TypeVar

__all__ = ["entity_ranking", "memory_entities", "question_entities"]

_NAME = re.compile(r"\b([A-Z][a-z]+)(?:['’]s)?\b")
_LABEL = re.compile(r"^\s*([^:\n]{1,40}):\s")
_NOT_NAMES = frozenset(
    """what when where which who whom whose why how is are was were do does did can could would will
    should shall may might has have had according in on at after before during since for from the a an
    and or but if did i my me we our you your yes no answer""".split()
)
_K = TypeVar("_K", bound=Hashable)


def _names(text: str) -> set[str]:
    return {m.group(1).casefold() for m in _NAME.finditer(text)}


def question_entities(question: str) -> frozenset[str]:
    """The names a question asks about (case-folded), question words and the like left out."""
    return frozenset(n for n in _names(question) if n not in _NOT_NAMES)


def memory_entities(content: str) -> frozenset[str]:
    """The names a memory mentions, with the person its leading label names (case-folded)."""
    names = _names(content)
    label = _LABEL.match(content)
    if label is not None:
        names.update(label.group(1).casefold().split())
    return frozenset(names - _NOT_NAMES)


def entity_ranking(question: str, ranked: Iterable[tuple[_K, str]]) -> list[_K]:
    """Of ``ranked`` (``(key, content)``, best first), those whose memory names one of the
    things ``question`` names, in the same order; ``[]`` when the question names nothing."""
    wanted = question_entities(question)
    if not wanted:
        return []
    return [key for key, content in ranked if wanted & memory_entities(content)]
