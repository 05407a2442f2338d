"""Issue 29 L2: extreme dates. A date a user gives is bounded at the contract (years
``MIN_YEAR``..``MAX_YEAR``, 1900..2999), naming the field; and the extractor, reading logs saved
before the bound, skips the date arithmetic a turn's date cannot take instead of failing the log
five times into the dead-letter stream."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from contracts.daily_logs import MAX_YEAR, MIN_YEAR, DailyLogState, DeleteLogs, SaveDailyLog
from contracts.graph import GraphPageQuery
from services.extractor.application.extraction import Outcome
from services.extractor.domain.dates import resolve_relative_dates
from services.extractor.domain.model import Turn
from tests.unit.test_extraction_pipeline import NOTICE, setup

pytestmark = pytest.mark.unit

EDGES = ["0001-01-01T00:00:00+14:00", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "1899-12-31T12:00:00Z",
         "3000-01-01T00:00:00Z"]


def refused_field(model: type, data: dict) -> tuple[tuple, str]:  # type: ignore[type-arg]
    with pytest.raises(ValidationError) as refused:
        model.model_validate(data)  # type: ignore[attr-defined]
    error = refused.value.errors()[0]
    return error["loc"], error["msg"]


def test_the_bounds_are_the_years_1900_to_2999() -> None:
    assert (MIN_YEAR, MAX_YEAR) == (1900, 2999)


@pytest.mark.parametrize("moment", EDGES)
def test_a_cut_off_outside_the_years_is_refused_naming_older_than(moment: str) -> None:
    loc, msg = refused_field(DeleteLogs, {"older_than": moment})
    assert loc == ("older_than",) and "1900" in msg and "2999" in msg


@pytest.mark.parametrize("day", ["0001-01-01", "9999-12-31", "1899-12-31", "3000-01-01"])
def test_a_log_date_outside_the_years_is_refused_naming_log_date(day: str) -> None:
    loc, _ = refused_field(SaveDailyLog, {"log_date": day})
    assert loc == ("log_date",)


@pytest.mark.parametrize("moment", EDGES)
def test_a_turn_said_outside_the_years_is_refused_naming_the_turn(moment: str) -> None:
    turns = [{"speaker": "user", "text": "hello", "at": "2025-03-01T10:00:00Z"},
             {"speaker": "user", "text": "again", "at": moment}]
    loc, msg = refused_field(SaveDailyLog, {"turns": turns})
    assert loc == ("turns",) and "turns[1].at" in msg


@pytest.mark.parametrize("moment", EDGES)
def test_graph_filters_outside_the_years_are_refused(moment: str) -> None:
    assert refused_field(GraphPageQuery, {"since": moment})[0] == ("since",)
    assert refused_field(GraphPageQuery, {"until": moment})[0] == ("until",)


def test_dates_inside_the_years_are_taken() -> None:
    SaveDailyLog.model_validate({"log_date": "1900-01-01", "turns": [
        {"speaker": "u", "text": "x", "at": "2999-12-31T23:59:59-12:00"}]})
    DeleteLogs.model_validate({"older_than": "2025-01-01T00:00:00+14:00"})


def test_a_stored_log_with_a_turn_at_an_extreme_date_still_reads() -> None:
    """Events written before the bound are read with the same Turn model: never refused there."""
    state = DailyLogState.model_validate({
        "id": "5d0b8f4a-7c2e-4b61-9e3f-2a8d6c1b4e70", "tenant": "t", "project": "p", "log_date": "2025-01-01",
        "turns": [{"speaker": "u", "text": "x", "at": "9999-12-31T23:59:59Z"}],
        "created_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-01T00:00:00Z"})
    assert state.turns and state.turns[0].at and state.turns[0].at.year == 9999


@pytest.mark.parametrize("day", [date(1, 1, 1), date(9999, 12, 31)])
def test_relative_dates_at_the_calendar_edge_are_left_as_said(day: date) -> None:
    text = "Yesterday I moved; tomorrow I start; last week I adopted a dog; in 3 years I retire."
    resolved = resolve_relative_dates(text, day)
    assert "Yesterday" in resolved and "tomorrow" in resolved  # what can be resolved is; the rest is kept


@pytest.mark.parametrize("at", [datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))),
                                datetime(9999, 12, 31, 23, 59, tzinfo=UTC)])
async def test_the_extractor_processes_a_log_whose_turn_is_at_the_calendar_edge(at: datetime) -> None:
    """The review's turn (at 0001-01-01 or 9999-12-31) raised OverflowError in the extractor five
    times, and the event went to the dead-letter stream with the log stuck in processing."""
    extractor, logs, memories, _ = setup()
    logs.turns = [Turn(speaker="user", text="Yesterday I moved to Lyon. Tomorrow I start a new job as a nurse.",
                       ref="turn:0", at=at)]
    report = await extractor.handle(NOTICE)
    assert report.outcome is Outcome.DONE and logs.status == "processed" and not logs.failures
    assert memories.writes >= 1
