"""Relative time expressions given the absolute date they meant, from the day they were said
(``domain/dates.py``), table-driven: the words as said, the date in brackets after them."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from contracts.memory import Category
from services.extractor.domain.dates import add_months, dated, monday, resolve_relative_dates
from services.extractor.domain.model import Fact

pytestmark = pytest.mark.unit

MONDAY = date(2023, 5, 8)  # LoCoMo's first session: 8 May 2023, a Monday
THURSDAY = date(2023, 5, 11)
SUNDAY = date(2023, 5, 14)


@pytest.mark.parametrize(("said", "day", "resolved"), [
    ("Ana went to a support group yesterday.", MONDAY, "Ana went to a support group yesterday (2023-05-07)."),
    ("Ana went there the day before yesterday.", MONDAY, "Ana went there the day before yesterday (2023-05-06)."),
    ("Ana is cooking today.", MONDAY, "Ana is cooking today (2023-05-08)."),
    ("Ana flies to Oslo tomorrow.", MONDAY, "Ana flies to Oslo tomorrow (2023-05-09)."),
    ("Ana moves the day after tomorrow.", MONDAY, "Ana moves the day after tomorrow (2023-05-10)."),
    ("Ana saw a play last night.", MONDAY, "Ana saw a play last night (2023-05-07)."),
    ("Ana ran this morning.", MONDAY, "Ana ran this morning (2023-05-08)."),
    ("Ana is going out tonight.", MONDAY, "Ana is going out tonight (2023-05-08)."),
    ("Ana started two days ago.", MONDAY, "Ana started two days ago (2023-05-06)."),
    ("Ana started 10 days ago.", MONDAY, "Ana started 10 days ago (2023-04-28)."),
    ("Ana quit a couple of days ago.", MONDAY, "Ana quit a couple of days ago (2023-05-06)."),
    ("Ana went hiking last week.", THURSDAY, "Ana went hiking last week (week of 2023-05-01)."),
    ("Ana is busy this week.", THURSDAY, "Ana is busy this week (week of 2023-05-08)."),
    ("Ana travels next week.", THURSDAY, "Ana travels next week (week of 2023-05-15)."),
    ("Ana adopted a cat three weeks ago.", MONDAY, "Ana adopted a cat three weeks ago (week of 2023-04-17)."),
    ("Ana adopted a beagle last month.", MONDAY, "Ana adopted a beagle last month (April 2023)."),
    ("Ana is moving next month.", MONDAY, "Ana is moving next month (June 2023)."),
    ("Ana got a raise this month.", MONDAY, "Ana got a raise this month (May 2023)."),
    ("Ana joined a month ago.", MONDAY, "Ana joined a month ago (April 2023)."),
    ("Ana painted a lake sunrise last year.", MONDAY, "Ana painted a lake sunrise last year (2022)."),
    ("Ana wants to run a marathon next year.", MONDAY, "Ana wants to run a marathon next year (2024)."),
    ("Ana moved here 5 years ago.", MONDAY, "Ana moved here 5 years ago (2018)."),
    ("Ana goes camping this weekend.", THURSDAY, "Ana goes camping this weekend (weekend of 2023-05-13)."),
    ("Ana went camping last weekend.", MONDAY, "Ana went camping last weekend (weekend of 2023-05-06)."),
    ("Ana goes camping next weekend.", THURSDAY, "Ana goes camping next weekend (weekend of 2023-05-20)."),
    ("Ana went camping this weekend.", SUNDAY, "Ana went camping this weekend (weekend of 2023-05-13)."),
    ("Ana ran a race last Saturday.", MONDAY, "Ana ran a race last Saturday (2023-05-06)."),
    ("Ana ran a race last Monday.", MONDAY, "Ana ran a race last Monday (2023-05-01)."),
    ("Ana has an exam next Friday.", THURSDAY, "Ana has an exam next Friday (2023-05-12)."),
    ("Ana has an exam this Friday.", MONDAY, "Ana has an exam this Friday (2023-05-12)."),
    ("Ana moves in 3 days.", MONDAY, "Ana moves in 3 days (2023-05-11)."),
    ("Ana starts in two weeks.", MONDAY, "Ana starts in two weeks (week of 2023-05-22)."),
    ("Ana graduates in a year.", MONDAY, "Ana graduates in a year (2024)."),
])
def test_a_relative_expression_gets_the_date_it_meant(said: str, day: date, resolved: str) -> None:
    assert resolve_relative_dates(said, day) == resolved


@pytest.mark.parametrize(("said", "day", "resolved"), [  # month and year edges
    ("Ana moves next month.", date(2023, 12, 20), "Ana moves next month (January 2024)."),
    ("Ana moved last month.", date(2024, 1, 3), "Ana moved last month (December 2023)."),
    ("Ana left 2 months ago.", date(2024, 2, 29), "Ana left 2 months ago (December 2023)."),
    ("Ana arrived yesterday.", date(2024, 1, 1), "Ana arrived yesterday (2023-12-31)."),
    ("Ana arrives tomorrow.", date(2024, 2, 28), "Ana arrives tomorrow (2024-02-29)."),  # a leap year
    ("Ana arrives tomorrow.", date(2023, 2, 28), "Ana arrives tomorrow (2023-03-01)."),
    ("Ana went hiking last week.", date(2024, 1, 2), "Ana went hiking last week (week of 2023-12-25)."),
    ("Ana starts next year.", date(2023, 12, 31), "Ana starts next year (2024)."),
    ("Ana had a party last Sunday.", date(2023, 1, 1), "Ana had a party last Sunday (2022-12-25)."),
])
def test_month_and_year_edges(said: str, day: date, resolved: str) -> None:
    assert resolve_relative_dates(said, day) == resolved


@pytest.mark.parametrize(("said", "resolved"), [
    ("Ana has felt better since yesterday.", "Ana has felt better since yesterday (2023-05-07)."),
    ("Yesterday was so much fun for Ana.", "Yesterday (2023-05-07) was so much fun for Ana."),
    ("Ana ran last Saturday and swims next Friday.", "Ana ran last Saturday (2023-05-06) and swims next Friday "
                                                      "(2023-05-12)."),
])
def test_the_words_are_kept_as_said(said: str, resolved: str) -> None:
    assert resolve_relative_dates(said, MONDAY) == resolved


@pytest.mark.parametrize("said", [
    "Ana loved the last week of June.",  # a determiner: a description, not the week before
    "Ana spent every last month of the year abroad.",
    "Ana reviewed last year's photos.",  # a possessive is left as said
    "The past year was rough for Ana.",  # a span up to now, not a point in time
    "Ana recently adopted a cat.",  # vague: nothing to resolve
    "Ana went to Oslo on 2023-05-01.",
    "Ana enjoys yesterdays and tomorrowland.",
])
def test_what_is_not_a_relative_date_is_left_alone(said: str) -> None:
    assert resolve_relative_dates(said, MONDAY) == said


def test_calendar_helpers() -> None:
    assert monday(SUNDAY) == MONDAY and monday(MONDAY) == MONDAY
    assert add_months(date(2023, 11, 5), 2) == (2024, 1) and add_months(date(2023, 1, 5), -1) == (2022, 12)


def _fact(content: str, at: datetime | None = None) -> Fact:
    return Fact(content=content, category=Category.USER_PROFILE, importance=2, confidence=0.7,
                turn_refs=("turn:0",), speaker="Ana", at=at)


def test_a_fact_is_dated_from_its_turn_else_from_its_log() -> None:
    log_day = date(2023, 5, 8)
    facts = dated([_fact("Ana went to a gym yesterday."),
                   _fact("Ana went to a gym yesterday.", at=datetime(2023, 6, 1, 14, 0, tzinfo=UTC)),
                   _fact("Ana loves tea.")], log_day)
    assert [f.content for f in facts] == ["Ana went to a gym yesterday (2023-05-07).",
                                         "Ana went to a gym yesterday (2023-05-31).", "Ana loves tea."]
    assert facts[1].at == datetime(2023, 6, 1, 14, 0, tzinfo=UTC)
