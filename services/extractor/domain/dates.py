"""Relative time expressions turned into absolute dates, from the day a thing was said.

A memory outlives the conversation it came from: "Ana went to the gym yesterday" is ambiguous a
week later. Each relative expression of a statement gets the absolute date it meant, from the day
it was said (its turn's ``at``, else its log's date), in brackets after the words as said (said on
Monday 2023-05-08)::

    yesterday               → yesterday (2023-05-07)          tomorrow → tomorrow (2023-05-09)
    last night              → last night (2023-05-07)         this morning → this morning (2023-05-08)
    two days ago            → two days ago (2023-05-06)       in 3 days → in 3 days (2023-05-11)
    last week / next week   → last week (week of 2023-05-01)  (weeks start on Monday)
    last month / next month → last month (April 2023) / next month (June 2023)
    last year / 2 years ago → last year (2022) / 2 years ago (2021)
    this weekend            → this weekend (weekend of 2023-05-13)  (its Saturday)
    last Saturday           → last Saturday (2023-05-06)      next Friday → next Friday (2023-05-12)

The words are kept: replacing them ("on 2023-05-07") cost LoCoMo observation coverage 0.017 (the
bracket 0.010), as observations and later questions keep the conversation's words (docs/extraction.md).
Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import date, timedelta

from services.extractor.domain.model import Fact

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a couple": 2,
            "couple of": 2}
_COUNT = r"(?P<{n}>\d{{1,2}}|a couple of|a couple|couple of|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_UNIT = r"(?P<{unit}>days?|weeks?|months?|years?)"
_WEEKDAY = r"(?P<weekday>" + "|".join(WEEKDAYS) + r")"
#: a determiner makes it a span or a description ("the last week of June", "every last month"): left as said
_DETERMINER = re.compile(r"\b(?:the|a|an|every|each|that|my|our|his|her|their|its|your)\s+$", re.IGNORECASE)
_EXPRESSION = re.compile(
    r"\b(?:"
    r"(?P<dby>the day before yesterday)|(?P<dat>the day after tomorrow)|"
    r"(?P<ago>" + _COUNT.format(n="n") + r"\s+" + _UNIT.format(unit="unit") + r"\s+ago)|"
    r"(?P<hence>in\s+" + _COUNT.format(n="n2") + r"\s+" + _UNIT.format(unit="unit2") + r"(?!\s+ago))|"
    r"(?P<part>(?P<partrel>last|this|tomorrow|yesterday)\s+(?P<partday>night|morning|afternoon|evening))|"
    r"(?P<day>yesterday|today|tonight|tomorrow)|"
    r"(?P<rel>(?P<which>last|this|next|past)\s+(?:(?P<period>week|month|year|weekend)|" + _WEEKDAY + r"))"
    r")\b(?!'s)",
    re.IGNORECASE,
)


def monday(day: date) -> date:
    """The Monday of the week ``day`` is in."""
    return day - timedelta(days=day.weekday())


def add_months(day: date, months: int) -> tuple[int, int]:
    """(year, month) ``months`` after ``day``'s month (negative: before)."""
    index = day.year * 12 + day.month - 1 + months
    return index // 12, index % 12 + 1


def month_name(year: int, month: int) -> str:
    return f"{MONTHS[month - 1]} {year}"


def _count(raw: str) -> int:
    low = re.sub(r"\s+", " ", raw.lower())
    return int(low) if low.isdigit() else _NUMBERS[low]


def _shifted(day: date, n: int, unit: str) -> tuple[str, str]:
    """(preposition, absolute phrase) for ``n`` units after ``day`` (negative: before)."""
    unit = unit.lower().rstrip("s")
    if unit == "day":
        return "on", (day + timedelta(days=n)).isoformat()
    if unit == "week":
        return "", f"the week of {monday(day + timedelta(weeks=n)).isoformat()}"
    if unit == "month":
        return "in", month_name(*add_months(day, n))
    return "in", str(day.year + n)


def _weekend(day: date, which: str) -> date:
    """The Saturday of the weekend meant: this (the coming one, or the current one on a weekend),
    last (the one before this week), next (the one after this one)."""
    this = monday(day) + timedelta(days=5)
    return {"this": this, "last": this - timedelta(days=7), "past": this - timedelta(days=7),
            "next": this + timedelta(days=7)}[which]


def _weekday(day: date, which: str, name: str) -> date:
    """last X: the latest X before ``day``; next X: the first X after it; this X: the X of ``day``'s week."""
    target = WEEKDAYS.index(name.lower())
    if which in ("last", "past"):
        return day - timedelta(days=(day.weekday() - target - 1) % 7 + 1)
    if which == "next":
        return day + timedelta(days=(target - day.weekday() - 1) % 7 + 1)
    return monday(day) + timedelta(days=target)


def absolute(match: re.Match[str], day: date) -> tuple[str, str]:
    """(the preposition it needs, the absolute phrase) for one matched expression."""
    g = match.groupdict()
    if g["dby"]:
        return "on", (day - timedelta(days=2)).isoformat()
    if g["dat"]:
        return "on", (day + timedelta(days=2)).isoformat()
    if g["ago"]:
        return _shifted(day, -_count(g["n"]), g["unit"])
    if g["hence"]:
        return _shifted(day, _count(g["n2"]), g["unit2"])
    if g["part"]:
        rel, part = g["partrel"].lower(), g["partday"].lower()
        shift = {"last": -1, "yesterday": -1, "this": 0, "tomorrow": 1}[rel]
        return "on", f"the {part} of {(day + timedelta(days=shift)).isoformat()}"
    if g["day"]:
        word = g["day"].lower()
        if word == "tonight":
            return "on", f"the night of {day.isoformat()}"
        return "on", (day + timedelta(days={"yesterday": -1, "today": 0, "tomorrow": 1}[word])).isoformat()
    which = g["which"].lower()
    if g["weekday"]:
        name = g["weekday"].capitalize()
        return "on", f"{name} {_weekday(day, which, name).isoformat()}"
    period = g["period"].lower()
    step = {"last": -1, "past": -1, "this": 0, "next": 1}[which]
    if period == "weekend":
        return "", f"the weekend of {_weekend(day, which).isoformat()}"
    if which == "past":
        return "", match.group(0)  # "past year": a span up to now, not a point; left as said
    return _shifted(day, step, period)


def resolve_relative_dates(text: str, day: date) -> str:
    """``text`` with the absolute date each relative time expression meant, said on ``day``, in
    brackets after it: the wording is kept as said (see the module's table)."""

    def rewrite(match: re.Match[str]) -> str:
        try:
            _, phrase = absolute(match, day)
        except OverflowError:  # a day at the edge of the calendar (0001-01-01, 9999-12-31): left as said
            return match.group(0)
        if phrase == match.group(0) or _DETERMINER.search(text[: match.start()]):
            return match.group(0)
        return f"{match.group(0)} ({_bracketed(phrase)})"

    return _EXPRESSION.sub(rewrite, text)


def _bracketed(phrase: str) -> str:
    """The absolute phrase as the bracket after the words says it: "the week of 2023-05-01" → "week of
    2023-05-01", "the night of 2023-05-07" and "Saturday 2023-05-06" → the date alone."""
    phrase = re.sub(r"^the (?:night|morning|afternoon|evening) of |^(?:" + "|".join(WEEKDAYS) + r") ", "", phrase,
                    flags=re.IGNORECASE)
    return phrase.removeprefix("the ")


def dated(facts: Sequence[Fact], log_date: date) -> list[Fact]:
    """Each fact with its relative time expressions resolved from the day it was said: its turn's
    ``at``, else the log's date."""
    out = []
    for fact in facts:
        day = fact.at.date() if fact.at is not None else log_date
        content = resolve_relative_dates(fact.content, day)
        out.append(fact if content == fact.content else replace(fact, content=content))
    return out
