"""Token-bucket arithmetic of the gateway's rate limits, without I/O."""

from __future__ import annotations

import pytest

from services.gateway.ratelimit import TokenBuckets

pytestmark = pytest.mark.unit


def test_burst_then_refill() -> None:
    buckets = TokenBuckets(per_minute=60, burst=3)
    assert [buckets.take("k", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = buckets.take("k", 0.0)
    assert wait == pytest.approx(1.0)
    assert buckets.take("k", 1.0) == 0.0


def test_keys_are_independent_and_bounded() -> None:
    buckets = TokenBuckets(per_minute=60, burst=1, max_keys=2)
    assert buckets.take("a", 0.0) == 0.0
    assert buckets.take("b", 0.0) == 0.0
    assert buckets.take("a", 0.0) > 0
    buckets.take("c", 0.0)
    assert buckets.take("b", 0.0) == 0.0  # "b" was evicted, so it starts with a full bucket
