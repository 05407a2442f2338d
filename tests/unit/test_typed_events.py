"""Typed events (issue 28.2): every aggregate a service appends is declared in contracts with the
model of its events' data, every event a service's own code builds parses into that model, and kit
handles an event of an undeclared aggregate in one place."""

from __future__ import annotations

import ast
import asyncio
import uuid
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from contracts.auth import (
    API_KEY_AGGREGATE,
    GRANT_AGGREGATE,
    USER_AGGREGATE,
    ApiKeyView,
    AuthEventType,
    GrantRevokedState,
    Scope,
    UserDeactivatedState,
)
from contracts.daily_logs import (
    DAILY_LOG_AGGREGATE,
    EXTRACTION_RESULT_AGGREGATE,
    EXTRACTION_TASK_AGGREGATE,
    DailyLogEventType,
    DailyLogState,
    ExtractionResultState,
    ExtractionTaskState,
    SaveDailyLog,
)
from contracts.envelope import EventEnvelope
from contracts.events import AGGREGATES, Event, aggregate, aggregates_of
from contracts.extraction_modes import (
    EXTRACTION_MODE_AGGREGATE,
    ExtractionMode,
    ExtractionModeState,
    SetExtractionMode,
)
from contracts.memory import (
    MEMORY_AGGREGATE,
    SHARED_MEMORY_AGGREGATE,
    MemoryEventType,
    MemoryState,
    SaveMemory,
    SaveSharedMemory,
    SharedMemoryState,
)
from contracts.messages import load_all
from contracts.subjects import AUTH, MEMORY, Names
from kit import events
from kit.service import CommandCall
from services.auth.application.events import AuthEvents
from services.auth.application.service import AuthService
from services.extractor.application.modes import ModeCommands, ModeGate
from services.memory.domain import daily_logs as log_rules
from services.memory.domain import model, shared

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
SERVICES = ("memory", "auth", "extractor", "gateway", "graph")


class Captured:
    """An event log that keeps what is appended."""

    def __init__(self) -> None:
        self.appended: list[tuple[str, EventEnvelope]] = []

    async def append_event(self, subject: str, event: EventEnvelope, *, expected_last_seq: int | None) -> int:
        self.appended.append((subject, event))
        return len(self.appended)


def built_by_memory() -> list[EventEnvelope]:
    state = model.new_memory("alice", SaveMemory(content="I live in Lyon."), NOW)
    gone = model.forget(state, None, NOW)
    share = shared.save(None, "alice", SaveSharedMemory(title="Trip", event="We went to Rome."), NOW)
    assert share is not None
    log = log_rules.save(None, "alice", SaveDailyLog(project="work", log_date=date(2026, 3, 1), events="Hiked."),
                         date(2026, 3, 1), NOW)
    assert log is not None
    task = ExtractionTaskState(id=uuid.uuid4(), tenant="alice", task_id="t-1", created_at=NOW, updated_at=NOW)
    result = ExtractionResultState(id=uuid.uuid4(), tenant="alice", project="work", log_id=log.id, task_id="t-1",
                                   memory_ids=[state.id], created_at=NOW, updated_at=NOW)
    ids = {"command_id": "key-00000001", "correlation_id": "c"}
    return [
        model.event_for(state, MemoryEventType.SAVED, now=NOW, **ids),
        model.event_for(gone, MemoryEventType.FORGOTTEN, now=NOW, **ids),
        shared.event_for(share, event_id=uuid.uuid4(), **ids),
        *(log_rules.log_event(log, t, **ids) for t in DailyLogEventType),
        log_rules.log_event(log_rules.delete(log, NOW), DailyLogEventType.DELETED, **ids),
        log_rules.task_event(task, **ids),
        log_rules.result_event(result, **ids),
    ]


def built_by_auth() -> list[EventEnvelope]:
    log = Captured()
    auth_events = AuthEvents(log, Names())
    service = AuthService.__new__(AuthService)  # (only _emit: its event log and names)
    service.events, service.names = log, Names()
    key = ApiKeyView(key_id=uuid.uuid4(), user_id="alice", name="laptop", prefix="eg_abc", scopes=[Scope.MEMORY_READ],
                     project=None, created_at=NOW, expires_at=None, last_used_at=None, revoked_at=NOW)
    call = CommandCall(tenant="alice", correlation_id="c", command_id="cmd-1")

    async def emit() -> None:
        await service._emit(call, key, AuthEventType.API_KEY_CREATED, NOW)
        await service._emit(call, key, AuthEventType.API_KEY_REVOKED, NOW)
        await auth_events.grant_revoked("alice", uuid.uuid4(), "revoked by the user")
        await auth_events.user_deactivated("alice", "cmd-2")

    asyncio.run(emit())
    return [event for _, event in log.appended]


def built_by_extractor() -> list[EventEnvelope]:
    appended: list[EventEnvelope] = []

    class Modes:
        async def set_project_mode(self, *_: Any) -> None: ...

        async def project_modes(self, _tenant: str) -> dict[str, ExtractionMode]:
            return {}

    async def append(_aggregate_id: str, event: EventEnvelope) -> None:
        appended.append(event)

    commands = ModeCommands(ModeGate(Modes(), clock=lambda: NOW), append)  # type: ignore[arg-type]
    call = CommandCall(tenant="alice", correlation_id="c", command_id="cmd-1")
    asyncio.run(commands.set(call, SetExtractionMode(project="work", mode=ExtractionMode.AGENT)))
    asyncio.run(commands.set(call, SetExtractionMode(project="work", mode=None)))
    return appended


BUILT = {"memory": built_by_memory, "auth": built_by_auth, "extractor": built_by_extractor}


@pytest.mark.parametrize("service", sorted(BUILT))
def test_every_event_a_service_builds_is_declared_and_parses_into_its_model(service: str) -> None:
    built = BUILT[service]()
    assert built
    for envelope in built:
        spec = AGGREGATES.get(envelope.aggregate)
        assert spec is not None, f"{service} appends {envelope.aggregate!r}, which no contract declares"
        assert spec.owner == service, f"{envelope.aggregate} is appended by {service}, declared as {spec.owner}'s"
        assert envelope.type in spec.types, f"{envelope.type} is not declared for {envelope.aggregate}"
        event = events.typed(envelope)
        assert isinstance(event.data, spec.state)
        # the wire form is the model's: what is on the streams reads back unchanged
        assert event.data.model_dump(mode="json") == envelope.data
        assert events.parse(envelope.model_dump_json().encode()).data == event.data


def test_every_declared_aggregate_is_appended_by_a_service_that_builds_it() -> None:
    load_all()
    built = {e.aggregate for make in BUILT.values() for e in make()}
    assert built == set(AGGREGATES), "an aggregate is declared that no service's own code builds, or the reverse"
    assert {spec.owner for spec in AGGREGATES.values()} <= {*SERVICES, "extractor"}
    assert set(aggregates_of(AUTH)) == {API_KEY_AGGREGATE, GRANT_AGGREGATE, USER_AGGREGATE}
    assert set(aggregates_of(MEMORY)) == {MEMORY_AGGREGATE, SHARED_MEMORY_AGGREGATE, DAILY_LOG_AGGREGATE,
                                          EXTRACTION_TASK_AGGREGATE, EXTRACTION_RESULT_AGGREGATE}
    assert AGGREGATES[EXTRACTION_MODE_AGGREGATE].state is ExtractionModeState


def test_the_models_of_each_aggregate() -> None:
    load_all()
    assert {name: spec.state for name, spec in AGGREGATES.items()} == {
        MEMORY_AGGREGATE: MemoryState, SHARED_MEMORY_AGGREGATE: SharedMemoryState, DAILY_LOG_AGGREGATE: DailyLogState,
        EXTRACTION_TASK_AGGREGATE: ExtractionTaskState, EXTRACTION_RESULT_AGGREGATE: ExtractionResultState,
        EXTRACTION_MODE_AGGREGATE: ExtractionModeState, API_KEY_AGGREGATE: ApiKeyView,
        GRANT_AGGREGATE: GrantRevokedState, USER_AGGREGATE: UserDeactivatedState,
    }


def test_an_aggregate_is_declared_once() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        aggregate(MEMORY_AGGREGATE, MEMORY, SharedMemoryState, MemoryEventType)
    assert aggregate(MEMORY_AGGREGATE, MEMORY, MemoryState, MemoryEventType) == MEMORY_AGGREGATE  # (the same again)


def test_auth_events_keep_their_wire_form() -> None:
    grant, user = built_by_auth()[2:]
    assert set(grant.data) == {"grant_id", "user_id", "reason"} and grant.data["grant_id"] == grant.aggregate_id
    assert user.data == {"user_id": "alice"}


def _envelope(aggregate_name: str, type_: str, data: dict[str, Any]) -> EventEnvelope:
    return EventEnvelope(event_id=uuid.uuid4(), type=type_, occurred_at=NOW, tenant="alice", aggregate=aggregate_name,
                         aggregate_id="a1", correlation_id="c", causation_id="k", data=data)


def test_kit_handles_an_undeclared_aggregate_in_one_place() -> None:
    stranger = _envelope("thing", "ThingHappened", {"x": 1})
    with pytest.raises(events.UnknownEvent):
        events.typed(stranger)
    assert events.parse_known(stranger.model_dump_json().encode()) is None
    user = _envelope(USER_AGGREGATE, AuthEventType.USER_DEACTIVATED, {"user_id": "alice"})
    assert [(e.data, seq) for e, seq in events.known([(stranger, 1), (user, 2)])] == [
        (UserDeactivatedState(user_id="alice"), 2)]


def test_a_type_no_contract_names_reads_with_its_aggregates_model() -> None:
    """restore_records appends the type an export names, and older releases' types stay on the
    streams: the data is the aggregate's state whatever the type."""
    event = events.typed(_envelope(EXTRACTION_MODE_AGGREGATE, "an_older_name", {"project": "work", "mode": "agent"}))
    assert event.data == ExtractionModeState(project="work", mode=ExtractionMode.AGENT)


def test_data_that_does_not_fit_its_model_is_refused() -> None:
    with pytest.raises(ValidationError):  # (a consumer dead-letters it, as before)
        events.typed(_envelope(USER_AGGREGATE, AuthEventType.USER_DEACTIVATED, {"user": "alice"}))


def test_an_event_is_typed_once() -> None:
    event = events.typed(_envelope(USER_AGGREGATE, AuthEventType.USER_DEACTIVATED, {"user_id": "alice"}))
    assert events.typed(event) is event
    assert isinstance(event, Event) and (event.tenant, event.aggregate_id, event.type) == (
        "alice", "a1", "UserDeactivated")


def test_aggregate_names_are_declared_only_in_contracts() -> None:
    """No service names an aggregate with a string of its own: ``aggregate=``, subjects and consumers
    (``Names.event``, ``events_of``, ``projector``) take the constants contracts declare."""
    names = set(AGGREGATES)
    found = []
    for path in (ROOT / "services").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names - {"memory", "user"}:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
            if isinstance(node, ast.keyword) and node.arg == "aggregate" and isinstance(node.value, ast.Constant):
                found.append(f"{path.relative_to(ROOT)}:{node.value.lineno} aggregate={node.value.value!r}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)  # names.projector(svc, "x")
                    and node.func.attr in ("projector", "events_of", "event")
                    and any(isinstance(a, ast.Constant) and a.value in names for a in node.args)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.attr}(…)")
    assert not found, "aggregate names written in services (use contracts' constants): " + ", ".join(found)
