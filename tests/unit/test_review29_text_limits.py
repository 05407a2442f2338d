"""Issue 29 M1: a text field that is parsed is bounded before it is parsed, and parsed in linear time.

``save_daily_log`` takes ``turns`` (and ``topics``) as plain text over MCP. The parser grew a turn
with ``text += …`` (quadratic) on the gateway's event loop: a 586 KiB request stalled the gateway
for seconds. No timing here: the refusal is shown to come from the length check (the parser is
never reached), and the parser's output is checked on inputs far larger than any request."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contracts import daily_logs
from contracts.daily_logs import (
    MAX_TOPICS_TEXT_CHARS,
    MAX_TURNS,
    MAX_TURNS_TEXT_CHARS,
    SaveDailyLog,
    turn_parts,
    turns_from_text,
)

pytestmark = pytest.mark.unit


class NoParsing:
    """Stands in for the line pattern: any use of it means parsing began."""

    def match(self, _line: str) -> None:
        raise AssertionError("the text was parsed before its length was checked")


def test_turns_text_over_the_limit_is_refused_before_any_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(daily_logs, "_SPEAKER_LINE", NoParsing())
    huge = "user: hello\n" + "and more\n" * 70_000  # 630 kB, the size that stalled the gateway
    with pytest.raises(ValueError, match=rf"turns as text is limited to {MAX_TURNS_TEXT_CHARS} characters"):
        turns_from_text(huge)
    with pytest.raises(ValidationError) as refused:
        SaveDailyLog.model_validate({"turns": huge})
    error = refused.value.errors()[0]
    assert error["loc"] == ("turns",) and str(MAX_TURNS_TEXT_CHARS) in error["msg"]


def test_topics_text_over_the_limit_is_refused_before_it_is_split(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_split(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the topics were split before their length was checked")

    monkeypatch.setattr(daily_logs.re, "split", no_split)
    with pytest.raises(ValidationError) as refused:
        SaveDailyLog.model_validate({"topics": "a," * MAX_TOPICS_TEXT_CHARS})
    error = refused.value.errors()[0]
    assert error["loc"] == ("topics",) and str(MAX_TOPICS_TEXT_CHARS) in error["msg"]


def test_the_parser_handles_400k_lines_of_one_turn() -> None:
    """400,000 lines continuing one turn (the shape that was quadratic): one turn, every line kept
    in order. The old parser copied the turn's text once per line (~10^11 bytes here)."""
    lines = [f"line {i} of the day" for i in range(400_000)]
    parts = turn_parts("Alice: it begins\n" + "\n".join(lines))
    assert len(parts) == 1
    speaker, text = parts[0]
    assert speaker == "Alice"
    assert text == "it begins\n" + "\n".join(lines)


def test_the_parser_handles_400k_lines_of_many_turns_and_stops_at_the_turn_limit() -> None:
    text = "\n".join(f"s{i % 7}: words {i}\n  more {i}  \n" for i in range(200_000))  # 400k non-empty lines
    parts = turn_parts(text)
    assert len(parts) == 200_000
    assert parts[0] == ("s0", "words 0\nmore 0") and parts[-1] == ("s2", "words 199999\nmore 199999")
    with pytest.raises(ValueError, match=f"at most {MAX_TURNS} turns"):
        turn_parts(text, MAX_TURNS)


def test_a_line_of_spaces_is_matched_without_backtracking() -> None:
    """The old line pattern (``^\\s*([^:\\n]{1,64}?)\\s*[:：]``) backtracked over a run of spaces
    (quadratic in the run); the new one cannot. Output only, on a line far longer than a request."""
    line = "x" + " " * 1_000_000 + "y"
    assert turn_parts(line) == [("user", line)]
    assert turn_parts(" " * 1_000_000 + "Bob:   hi ") == [("Bob", "hi")]


def test_plain_text_turns_read_as_before() -> None:
    turns = turns_from_text("Alice: hi there\n  continued  \nhttps://x.y\nBob ： yo\n\nplain\n")
    assert [(t.speaker, t.text) for t in turns] == [("Alice", "hi there\ncontinued\nhttps://x.y"),
                                                  ("Bob", "yo\nplain")]
    assert [(t.speaker, t.text) for t in turns_from_text("no speaker\nuser: then one")] == [
        ("user", "no speaker"), ("user", "then one")]
