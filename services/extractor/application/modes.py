"""Extraction modes in the pipeline (``contracts.extraction_modes``): the gate every pending log
passes before the pipeline claims it, the sweep that takes the logs whose turn has come, and the
mode commands and query.

    pending event → gate: the project's mode (its own, else the install default) lets the pipeline
    claim now? yes → claim as before; no → the log waits (``waiting``), for agents
    sweep (every few seconds): each waiting log whose mode now lets the pipeline claim it → handled
    (auto, or handoff past the hand-off time; a log an agent claimed meanwhile is not ours: dropped)
    a later event of a log that is no longer pending → it waits no more
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol
from uuid import NAMESPACE_URL, UUID, uuid5

from contracts.envelope import EventEnvelope
from contracts.events import Event
from contracts.extraction_modes import (
    EXTRACTION_MODE_AGGREGATE,
    EXTRACTION_MODE_SET,
    ExtractionMode,
    ExtractionModes,
    ExtractionModeState,
    GetExtractionModes,
    ProjectExtractionMode,
    SetExtractionMode,
    mode_id,
)
from services.extractor.application.ports import LogNotice
from services.extractor.domain.modes import may_claim

if TYPE_CHECKING:
    from kit.service import Call, CommandCall
    from services.extractor.application.extraction import Extractor

log = logging.getLogger("engram.extractor")


class ModeStore(Protocol):
    async def project_modes(self, tenant: str) -> dict[str, ExtractionMode]: ...
    async def project_mode(self, tenant: str, project: str) -> ExtractionMode | None: ...
    async def set_project_mode(self, tenant: str, project: str, mode: ExtractionMode | None) -> None: ...
    async def wait(self, notice: LogNotice, since: datetime) -> None: ...
    async def done_waiting(self, tenant: str, log_id: str) -> None: ...
    async def waiting(self, limit: int = 1_000) -> list[tuple[LogNotice, datetime]]: ...


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class ModeGate:
    store: ModeStore
    default: ExtractionMode = ExtractionMode.AUTO
    handoff: timedelta = timedelta(minutes=30)
    clock: Callable[[], datetime] = field(default=_now)

    async def mode(self, tenant: str, project: str) -> ExtractionMode:
        return await self.store.project_mode(tenant, project) or self.default

    async def admits(self, notice: LogNotice) -> bool:
        """Whether the pipeline may claim this pending log now; if not, the log waits."""
        now = self.clock()
        since = notice.since or now
        if may_claim(await self.mode(notice.tenant, notice.project), since, self.handoff, now):
            await self.store.done_waiting(notice.tenant, notice.log_id)
            return True
        await self.store.wait(notice, since)
        return False

    async def left(self, notice: LogNotice) -> None:
        """The log is no longer pending (claimed by an agent, processed, deleted): it waits no more."""
        await self.store.done_waiting(notice.tenant, notice.log_id)

    async def modes(self, tenant: str, project_scope: str | None = None) -> ExtractionModes:
        own = await self.store.project_modes(tenant)
        return ExtractionModes(
            default=self.default, handoff_minutes=self.handoff.total_seconds() / 60,
            projects=[ProjectExtractionMode(project=p, mode=m, source="project") for p, m in own.items()
                      if project_scope is None or p == project_scope])


async def sweep(extractor: Extractor, gate: ModeGate) -> int:
    """Hand the pipeline every waiting log whose project's mode now lets it claim it: how many were
    handed over (a log an agent took meanwhile comes back not claimed and waits no more)."""
    now, handed = gate.clock(), 0
    for notice, since in await gate.store.waiting():
        if not may_claim(await gate.mode(notice.tenant, notice.project), since, gate.handoff, now):
            continue
        try:
            await extractor.handle(notice)
            handed += 1
        except Exception:  # transient (the memory service down): the log waits for the next sweep
            log.exception("the waiting log %s could not be handed to the pipeline", notice.log_id)
    return handed


AppendEvent = Callable[[str, EventEnvelope], Awaitable[None]]


@dataclass
class ModeCommands:
    """The extraction-mode command and query (the extractor's ``ServiceRuntime`` handlers)."""

    gate: ModeGate
    append: AppendEvent  # (subject token: the aggregate id, event) → on the event log

    async def set(self, call: CommandCall, cmd: SetExtractionMode) -> ProjectExtractionMode:
        call.require_project(cmd.project)
        state = ExtractionModeState(project=cmd.project, mode=cmd.mode)
        aggregate_id = mode_id(call.tenant, cmd.project)
        await self.append(aggregate_id, EventEnvelope(
            event_id=_event_id(call.command_id, aggregate_id), type=EXTRACTION_MODE_SET, occurred_at=self.gate.clock(),
            tenant=call.tenant, aggregate=EXTRACTION_MODE_AGGREGATE, aggregate_id=aggregate_id,
            correlation_id=call.correlation_id, causation_id=call.command_id, data=state.model_dump(mode="json")))
        await self.gate.store.set_project_mode(call.tenant, cmd.project, cmd.mode)
        return (await self.gate.modes(call.tenant)).of(cmd.project)

    async def get(self, call: Call, _query: GetExtractionModes) -> ExtractionModes:
        return await self.gate.modes(call.tenant, call.project_scope)


def _event_id(command_id: str, aggregate_id: str) -> UUID:
    return uuid5(NAMESPACE_URL, f"engram:extraction-mode:{command_id}:{aggregate_id}")


def latest_modes(events: Iterable[Event[ExtractionModeState]]) -> list[tuple[str, str, ExtractionMode]]:
    """Each project's mode after the last of its events, in log order (a replay): (tenant, project, mode)."""
    latest: dict[tuple[str, str], ExtractionMode | None] = {}
    for event in events:
        latest[(event.tenant, event.data.project)] = event.data.mode
    return [(t, p, m) for (t, p), m in latest.items() if m is not None]


__all__ = ["ModeCommands", "ModeGate", "ModeStore", "latest_modes", "sweep"]
