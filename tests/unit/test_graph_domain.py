"""The graph's rules without I/O: node rows from event states, key families, states at query time,
and the opaque page cursor (bound to its filters, refused naming ``cursor``)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, date, datetime, timedelta
from uuid import uuid4

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.daily_logs import DailyLogState, ProcessingStatus
from contracts.errors import ServiceError
from contracts.graph import GraphPageQuery, NodeState, NodeType
from contracts.memory import Category, MemoryState, MemoryStatus, Provenance
from services.graph.domain.model import (
    decode_cursor,
    encode_cursor,
    filters_digest,
    graph_node,
    key_family,
    label_of,
    log_row,
    memory_row,
    node_state,
)

pytestmark = pytest.mark.unit
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def memory(**kw: object) -> MemoryState:
    base = dict(id=uuid4(), tenant="alice", project="home", content="I have a dog named Rex",
                created_at=NOW - timedelta(days=3), updated_at=NOW - timedelta(days=1))
    base.update(kw)
    return MemoryState.model_validate(base)


def test_key_families_group_slots_not_statements() -> None:
    assert key_family("preference.pet_dog") == key_family("preference.pet_cat") == "preference.pet"
    assert key_family("profile.location") == "profile.location"
    assert key_family("profile.caroline__occupation") == "profile.caroline"
    assert key_family(None) is None
    # the extractor's keys of one statement (words + a 6-hex digest) belong to no family
    assert key_family("profile.went_rome_once_3f2a9c") is None
    assert key_family("profile.s_3f2a9c") is None


def test_states_forgotten_then_expiring_then_new_then_active() -> None:
    old = NOW - timedelta(days=30)
    assert node_state(forgotten=True, created_at=NOW, expires_at=NOW, now=NOW) is NodeState.FORGOTTEN
    assert node_state(forgotten=False, created_at=NOW, expires_at=NOW + timedelta(days=7), now=NOW) is NodeState.EXPIRING
    assert node_state(forgotten=False, created_at=old, expires_at=NOW + timedelta(days=7, seconds=1),
                      now=NOW) is NodeState.ACTIVE
    assert node_state(forgotten=False, created_at=NOW - timedelta(hours=24), expires_at=None, now=NOW) is NodeState.NEW
    assert node_state(forgotten=False, created_at=NOW - timedelta(hours=24, seconds=1), expires_at=None,
                      now=NOW) is NodeState.ACTIVE


def test_a_state_is_computed_when_read_not_when_stored() -> None:
    row = memory_row(memory(created_at=NOW - timedelta(hours=2), updated_at=NOW - timedelta(hours=2)))
    assert graph_node(row, NOW).state is NodeState.NEW
    assert graph_node(row, NOW + timedelta(days=1)).state is NodeState.ACTIVE


def test_memory_row_carries_the_current_version_and_provenance() -> None:
    log_id = uuid4()
    state = memory(category=Category.PREFERENCE, memory_key="preference.pet_dog", version=3,
                   status=MemoryStatus.FORGOTTEN, forget_reason="moved",
                   provenance=Provenance(log_id=log_id, task_id="t1", turns=[2]))
    row = memory_row(state)
    assert row.id == str(state.id) and row.type is NodeType.MEMORY and row.version == 3 and row.forgotten
    assert row.family == "preference.pet" and row.log_id == f"log:{log_id}"
    node = graph_node(row, NOW)
    assert node.state is NodeState.FORGOTTEN and node.detail["forget_reason"] == "moved"
    assert node.detail["provenance"]["turns"] == [2]


def test_a_processed_log_expires_after_retention() -> None:
    state = DailyLogState(id=uuid4(), tenant="alice", project="home", log_date=date(2026, 11, 20),
                          topics=["hiking", "alps"], processing_status=ProcessingStatus.PROCESSED,
                          processed_at=NOW - timedelta(days=10), created_at=NOW - timedelta(days=11),
                          updated_at=NOW - timedelta(days=10))
    row = log_row(state, retention_days=14)
    assert row.id == f"log:{state.id}" and row.label == "2026-11-20 · hiking, alps"
    assert row.expires_at == NOW + timedelta(days=4)
    assert graph_node(row, NOW).state is NodeState.EXPIRING
    assert graph_node(log_row(state, retention_days=30), NOW).state is NodeState.ACTIVE
    pending = state.model_copy(update={"processing_status": ProcessingStatus.PENDING, "processed_at": None})
    assert log_row(pending, retention_days=14).expires_at is None


def test_labels_are_one_short_line() -> None:
    assert label_of("a  b\n c") == "a b c"
    long = label_of("word " * 100)
    assert len(long) <= 120 and long.endswith("…")


@given(seq=st.integers(0, 2**62), project=st.one_of(st.none(), st.sampled_from(["home", "work"])))
def test_a_cursor_round_trips_for_its_own_filters_only(seq: int, project: str | None) -> None:
    q = GraphPageQuery(project=project)
    digest = filters_digest(q, project)
    cursor = encode_cursor(seq, digest)
    assert decode_cursor(cursor, digest) == seq
    other = filters_digest(GraphPageQuery(project=project, node_types=[NodeType.MEMORY]), project)
    with pytest.raises(ServiceError) as refused:
        decode_cursor(cursor, other)
    assert refused.value.field == "cursor"


@pytest.mark.parametrize("bad", [
    "nonsense", "!!!", base64.urlsafe_b64encode(b"[1,2]").decode(),
    base64.urlsafe_b64encode(json.dumps({"v": 1}).encode()).decode(),
    base64.urlsafe_b64encode(json.dumps({"v": 1, "s": -1, "f": "x"}).encode()).decode(),
    base64.urlsafe_b64encode(json.dumps({"v": 1, "s": True, "f": "x"}).encode()).decode(),
    base64.urlsafe_b64encode(json.dumps({"v": 2, "s": 5, "f": "x"}).encode()).decode(),
    base64.urlsafe_b64encode(b"\xff\xfe").decode(),
])
def test_a_bad_cursor_is_refused_naming_the_field(bad: str) -> None:
    with pytest.raises(ServiceError) as refused:
        decode_cursor(bad, "x")
    assert refused.value.field == "cursor" and "cursor" in refused.value.message


def test_page_limits_come_from_the_contract() -> None:
    assert GraphPageQuery().limit == 200
    with pytest.raises(ValueError, match="1000"):
        GraphPageQuery(limit=1001)
