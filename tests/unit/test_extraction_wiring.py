"""The extractor's wiring to contracts/daily_logs.py: what it reads of a claimed log, the provenance
it writes, how it reads daily-log events, and the per-tenant schedules."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime

import pytest

from contracts.daily_logs import DAILY_LOG_AGGREGATE, DailyLogState, DailyLogView, ProcessingStatus, Turn
from contracts.envelope import EventEnvelope
from contracts.events import Event
from kit.events import typed
from services.extractor.adapters.log_source import turns_of
from services.extractor.adapters.memory_client import provenance_of
from services.extractor.application.extraction import recover_stuck, retention, run_maintenance
from services.extractor.application.ports import Origin
from services.extractor.domain.merge import turn_indices
from services.extractor.domain.model import Fact
from services.extractor.entrypoints.nats import notice_from_event

pytestmark = pytest.mark.unit
NOW = datetime(2026, 3, 1, tzinfo=UTC)


def view(**fields: object) -> DailyLogView:
    return DailyLogView(id=uuid.uuid4(), project="default", log_date=date(2026, 3, 1), processing_status="processing",
                        retry_count=1, version=2, created_at=NOW, updated_at=NOW, **fields)  # type: ignore[arg-type]


def test_a_claimed_log_is_read_as_its_turns_then_its_fields() -> None:
    v = view(turns=[Turn(speaker="user", text="I live in Lyon."), Turn(speaker="assistant", text="Nice.")],
             events="Went hiking.", topics=["hiking", "dogs"], mood=1)
    turns = turns_of(v)
    assert [(t.speaker, t.text, t.ref) for t in turns] == [
        ("user", "I live in Lyon.", "turn:0"), ("assistant", "Nice.", "turn:1"),
        ("user", "Went hiking.", "field:events"), ("user", "hiking, dogs", "field:topics"),
    ]
    assert turns_of(view()) == []


def test_provenance_names_the_log_the_task_and_the_turns() -> None:
    assert turn_indices(("turn:3", "field:events", "turn:1", "turn:3", "turn:x")) == [3, 1]
    log_id = uuid.uuid4()
    fact = Fact(content="The user lives in Lyon", category="profile", importance=4, confidence=0.9,
                turn_refs=("turn:0",), speaker="user")
    prov = provenance_of(fact, Origin(str(log_id), "builtin-v1"))
    assert prov is not None and prov.log_id == log_id and prov.task_id == "builtin-v1" and prov.turns == [0]
    assert provenance_of(fact, None) is None


def _event(state: DailyLogState) -> Event[DailyLogState]:
    return typed(EventEnvelope(event_id=uuid.uuid4().hex, type="DailyLogSaved", tenant=state.tenant,
                         aggregate=DAILY_LOG_AGGREGATE, aggregate_id=str(state.id), data=state.model_dump(mode="json"),
                         occurred_at=NOW, correlation_id="c", causation_id="k"))


def test_a_daily_log_event_is_read_as_its_status_and_version() -> None:
    state = DailyLogState(id=uuid.uuid4(), tenant="alice", project="work", log_date=date(2026, 3, 1), version=4,
                          processing_status=ProcessingStatus.PENDING, created_at=NOW, updated_at=NOW)
    notice = notice_from_event(_event(state), seq=99)
    assert (notice.tenant, notice.log_id, notice.status, notice.version, notice.project) == (
        "alice", str(state.id), "pending", 4, "work")
    tomb = state.model_copy(update={"deleted": True, "processing_status": ProcessingStatus.PROCESSED})
    assert notice_from_event(_event(tomb), seq=100).status == "deleted"


class Tenants:
    def __init__(self, *names: str) -> None:
        self.names = list(names)

    async def seen(self, tenant: str) -> None:
        if tenant not in self.names:
            self.names.append(tenant)

    async def all(self) -> list[str]:
        return list(self.names)


class Logs:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int, str]] = []

    async def recover_stuck(self, tenant: str, timeout_minutes: int, *, key: str) -> int:
        if tenant == "broken":
            raise ConnectionError("memory service down")
        self.calls.append(("recover", tenant, timeout_minutes, key))
        return 1

    async def delete_processed(self, tenant: str, retention_days: int, *, key: str) -> int:
        self.calls.append(("delete", tenant, retention_days, key))
        return 2


async def test_the_schedules_run_for_every_tenant_seen_and_a_failing_tenant_stops_no_other() -> None:
    logs, tenants = Logs(), Tenants("alice", "broken", "bob")
    assert await recover_stuck(logs, tenants, stuck_minutes=30, round_id="recover-7") == 2  # type: ignore[arg-type]
    assert await retention(logs, tenants, retention_days=14, round_id="retention-7") == 6  # type: ignore[arg-type]
    assert ("recover", "bob", 30, "x:recover:recover-7") in logs.calls
    assert ("delete", "alice", 14, "x:retention:retention-7") in logs.calls
    # one key per round: replicas running the same round send the same commands (acted on once)
    assert await run_maintenance(logs, tenants, stuck_minutes=5, retention_days=1, round_id="r") == (2, 6)  # type: ignore[arg-type]
