"""How much a memory weighs in recall as it ages: importance, recency, category, pin and expiry.

Pure, no I/O. Recall multiplies a hit's relevance by :func:`weight`:

- **Lasting facts** do not fade: who the user is (``user_profile``), what they like
  (``preference``), who they are with (``relationship``), how they are (``personality``), what
  they can do (``skill``), how they want to be answered (``conversation_style``).
- **Passing things** fade with a half-life per category family: states and moods
  (``emotional_pattern``, 30 days), plans and goals (``goal``, 180 days: a plan is done or
  dropped within months), uncategorised free-form notes (365 days). A sentence about a moment
  ("today", "tonight", "this morning", "right now") is a passing state whatever its category
  (7 days): "I'm tired today" must not rank like "I'm allergic to nuts" a year later.
- A faded memory never drops below :attr:`DecayPolicy.floor` of its weight: decay reorders, it
  does not forget (forgetting is a user's or the rules' act, recorded in the history).
- **Importance** (1-5) scales the weight (3 is neutral); each repeat of a merged fact adds to it,
  with diminishing returns.
- **Pinned** memories never fade.
- **Expiry** (``forget_after``, a moment): from then on the memory leaves recall
  (:func:`in_recall` is False; the weight 0) and stays in its history.

Half-lives are configurable per category (:func:`policy_from_settings`, from
``ENGRAM_DECAY_HALF_LIFE_<CATEGORY>`` settings: days, or ``never``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum

from contracts.memory import Category


class Family(StrEnum):
    """What kind of truth a memory holds, which decides whether it fades."""

    LASTING = "lasting"  # identity, preferences, relations, character, skills, style
    STATE = "state"  # moods and passing states
    PLAN = "plan"  # goals, plans, upcoming events
    NOTE = "note"  # uncategorised free-form memories
    MOMENT = "moment"  # a sentence about a moment ("today", "right now"), whatever its category


FAMILY_OF: dict[Category | None, Family] = {
    Category.USER_PROFILE: Family.LASTING,
    Category.PREFERENCE: Family.LASTING,
    Category.PERSONALITY: Family.LASTING,
    Category.SKILL: Family.LASTING,
    Category.RELATIONSHIP: Family.LASTING,
    Category.CONVERSATION_STYLE: Family.LASTING,
    Category.EMOTIONAL_PATTERN: Family.STATE,
    Category.GOAL: Family.PLAN,
    None: Family.NOTE,
}

#: Days for a memory's recency factor to halve, per family (None: never fades).
DEFAULT_HALF_LIVES: dict[Family, float | None] = {
    Family.LASTING: None,
    Family.STATE: 30.0,
    Family.PLAN: 180.0,
    Family.NOTE: 365.0,
    Family.MOMENT: 7.0,
}
#: The least share of its weight a faded memory keeps.
DEFAULT_FLOOR = 0.25
#: Importance 3 is neutral; each step up or down moves the weight by this share.
IMPORTANCE_STEP = 0.15
#: Each doubling of a merged fact's sources adds this share (repetition raises weight).
REPEAT_STEP = 0.05
MAX_REPEAT_BONUS = 0.3
#: How much the weight moves a hit in recall: the order is by ``relevance + DECAY_BLEND * ln(weight)``
#: (:func:`blended`). Relevance is a fused rank score (first = 1, the next ones a few hundredths
#: apart), so the weight re-orders near-ties and sinks what faded by a rank or two, never overriding
#: relevance. Measured on LoCoMo (bench/locomo.py --decay, R@5/R@10/R@25, no decay 0.727/0.801/0.864):
#: multiplying by the weight 0.653/0.742/0.820; blend 0.1 0.722/0.799/0.864; blend 0.03 0.728/0.801/0.864.
DECAY_BLEND = 0.03

_MOMENT = re.compile(
    r"\b(?:today|tonight|this (?:morning|afternoon|evening)|right now|at the moment|yesterday|last night|"
    r"this weekend|just now)\b",
    re.IGNORECASE,
)
_SETTING = re.compile(r"^ENGRAM_DECAY_HALF_LIFE_([A-Z_]+)$")


@dataclass(frozen=True)
class DecayPolicy:
    """Half-lives per family, with overrides per category (days; None: never fades)."""

    half_lives: Mapping[Family, float | None] = field(default_factory=lambda: dict(DEFAULT_HALF_LIVES))
    by_category: Mapping[Category | None, float | None] = field(default_factory=dict)
    floor: float = DEFAULT_FLOOR

    def half_life(self, category: Category | None, content: str | None = None) -> float | None:
        """The half-life (days) of a memory of ``category`` saying ``content``; None: it never fades."""
        family = family_of(category, content)
        if family is not Family.MOMENT and category in self.by_category:
            return self.by_category[category]
        return self.half_lives.get(family, DEFAULT_HALF_LIVES[family])


def family_of(category: Category | None, content: str | None = None) -> Family:
    """The family of a memory: a sentence about a moment is a MOMENT whatever its category."""
    if content is not None and _MOMENT.search(content):
        return Family.MOMENT
    return FAMILY_OF[category]


def in_recall(now: datetime, forget_after: datetime | None = None) -> bool:
    """Whether a memory may be recalled at ``now``: not once its ``forget_after`` has come."""
    return forget_after is None or now < forget_after


def recency(age_days: float, half_life_days: float | None, floor: float = DEFAULT_FLOOR) -> float:
    """The recency factor: 1 when new (or never fading), halving every ``half_life_days``, never
    below ``floor``. A negative age (a memory dated after ``now``) counts as new."""
    if half_life_days is None:
        return 1.0
    if half_life_days <= 0:
        raise ValueError(f"half_life_days must be positive (or None: never fades), not {half_life_days}")
    return max(floor, 0.5 ** (max(0.0, age_days) / half_life_days))


def importance_factor(importance: int, repeats: int = 1) -> float:
    """Importance 1-5 around a neutral 3, plus a bonus for a fact said ``repeats`` times."""
    if not 1 <= importance <= 5:
        raise ValueError(f"importance must be 1-5, not {importance}")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats}")
    bonus = min(MAX_REPEAT_BONUS, REPEAT_STEP * math.log2(repeats))
    return 1.0 + IMPORTANCE_STEP * (importance - 3) + bonus


def weight(
    *,
    importance: int,
    category: Category | None,
    written_at: datetime,
    now: datetime,
    content: str | None = None,
    pinned: bool = False,
    forget_after: datetime | None = None,
    repeats: int = 1,
    policy: DecayPolicy | None = None,
) -> float:
    """The factor recall multiplies a hit's relevance by: 0 once expired; else importance times
    recency (1 for a pinned or lasting memory). ``written_at`` is when the memory was last said
    (its latest version or merged source)."""
    if not in_recall(now, forget_after):
        return 0.0
    policy = policy or DecayPolicy()
    factor = importance_factor(importance, repeats)
    if pinned:
        return factor
    age_days = (now - written_at).total_seconds() / 86_400
    return factor * recency(age_days, policy.half_life(category, content), policy.floor)


def blended(relevance: float, weight_: float, blend: float = DECAY_BLEND) -> float:
    """The key recall orders hits by: ``relevance`` moved by ``blend * ln(weight)`` (an expired
    memory, weight 0, sinks below everything)."""
    return relevance + blend * math.log(weight_) if weight_ > 0 else float("-inf")


def policy_from_settings(settings: Mapping[str, str], base: DecayPolicy | None = None) -> DecayPolicy:
    """A policy with the half-lives of ``ENGRAM_DECAY_HALF_LIFE_<CATEGORY>`` settings (the
    category's name in capitals, or ``UNCATEGORISED``; ``MOMENT`` for sentences about a moment):
    a positive number of days, or ``never``. A bad value is refused naming the setting."""
    base = base or DecayPolicy()
    by_category: dict[Category | None, float | None] = dict(base.by_category)
    half_lives: dict[Family, float | None] = dict(base.half_lives)
    names = {c.name: c for c in Category}
    for key, raw in settings.items():
        match = _SETTING.match(key)
        if not match:
            continue
        name = match.group(1)
        value = _days(key, raw)
        if name == "UNCATEGORISED":
            by_category[None] = value
        elif name == "MOMENT":
            half_lives[Family.MOMENT] = value
        elif name in names:
            by_category[names[name]] = value
        else:
            known = ", ".join([*names, "UNCATEGORISED", "MOMENT"])
            raise ValueError(f"{key}: no category {name!r}; one of {known}")
    return replace(base, by_category=by_category, half_lives=half_lives)


def _days(key: str, raw: str) -> float | None:
    text = raw.strip().casefold()
    if text == "never":
        return None
    try:
        days = float(text)
    except ValueError:
        raise ValueError(f"{key} must be a number of days or 'never', not {raw!r}") from None
    if not math.isfinite(days) or days <= 0:
        raise ValueError(f"{key} must be a positive number of days or 'never', not {raw!r}")
    return days
