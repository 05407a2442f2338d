"""The 'similar' lists' rule without I/O: a memory offered to a neighbour's list (similarity is
symmetric) is taken when the list has room or its weakest edge is weaker, and the list keeps its
``limit`` strongest."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.graph.domain.similar import Offer, offer

pytestmark = pytest.mark.unit


def test_a_list_with_room_takes_the_memory_and_drops_nothing() -> None:
    assert offer({}, "m", 0.61, 5) == Offer(take=True)
    assert offer({"a": 0.9, "b": 0.7}, "m", 0.61, 3) == Offer(take=True)


def test_a_full_list_takes_a_closer_memory_and_lets_its_weakest_go() -> None:
    full = {"a": 0.9, "b": 0.8, "c": 0.65}
    assert offer(full, "m", 0.7, 3) == Offer(take=True, drop=("c",))
    assert offer(full, "m", 0.95, 3) == Offer(take=True, drop=("c",))


def test_a_full_list_keeps_what_it_has_against_a_weaker_or_equal_memory() -> None:
    full = {"a": 0.9, "b": 0.8, "c": 0.65}
    assert offer(full, "m", 0.6, 3) == Offer(take=False)
    assert offer(full, "m", 0.65, 3) == Offer(take=False)  # a tie keeps what is there


def test_a_memory_already_on_the_list_is_re_weighed_not_doubled() -> None:
    assert offer({"m": 0.7, "a": 0.9}, "m", 0.8, 2) == Offer(take=True)


def test_an_over_full_list_comes_back_to_its_limit() -> None:
    assert offer({"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.66}, "m", 0.85, 2) == Offer(take=True, drop=("b", "c", "d"))


def test_a_limit_below_one_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="limit"):
        offer({}, "m", 0.7, 0)


@given(current=st.dictionaries(st.sampled_from("abcdefgh"), st.floats(0.6, 1.0), max_size=8),
       score=st.floats(0.6, 1.0), limit=st.integers(1, 6))
def test_the_list_afterwards_is_the_strongest_limit_of_the_list_and_the_memory(
    current: dict[str, float], score: float, limit: int,
) -> None:
    decided = offer(current, "m", score, limit)
    after = {k: v for k, v in current.items() if k not in decided.drop}
    if decided.take:
        after["m"] = score
    assert len(after) <= max(limit, len(current)) and (len(after) <= limit or not decided.take)
    if len(current) < limit:
        assert decided.take and not decided.drop
    elif decided.take:  # taken: no weaker edge than the memory's stays beyond the limit
        assert len(after) == limit
        assert min(after.values()) == min(sorted(list(current.values()) + [score], reverse=True)[:limit])
    else:  # refused: the limit-th strongest is at least as strong
        assert sorted(current.values(), reverse=True)[limit - 1] >= score
