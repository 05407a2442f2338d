"""The daily logs that exist, read from the event log (every daily-log event's ``data`` is the log's
whole state, ``contracts.daily_logs.DailyLogState``: the last event of a log says where it stands),
and a log's current content through the memory service's ``GetDailyLog`` query."""

from __future__ import annotations

from datetime import date
from uuid import UUID

from contracts.daily_logs import DAILY_LOG_AGGREGATE, DailyLogLookup, DailyLogState, GetDailyLog
from contracts.errors import ErrorCode
from kit import events
from kit.bus import Bus
from kit.client import Client, ServiceFailure
from services.extractor.adapters.log_source import turns_of
from services.extractor.application.ports import ClaimedLog
from services.extractor.application.reextract import LogRef


class EventLogCatalog:
    """:class:`~services.extractor.application.reextract.LogCatalog` over the event log and the
    memory service's queries."""

    def __init__(self, bus: Bus, client: Client) -> None:
        self.bus = bus
        self.client = client

    async def logs(self, *, since: date | None = None, tenant: str | None = None) -> list[LogRef]:
        latest: dict[tuple[str, str], DailyLogState] = {}
        for event, _seq in await events.history(self.bus, self.bus.names.events_of(DAILY_LOG_AGGREGATE)):
            if tenant is not None and event.tenant != tenant:
                continue
            latest[(event.tenant, event.aggregate_id)] = event.data
        refs: list[LogRef] = []
        for (who, log_id), state in latest.items():
            if state.deleted or (since is not None and state.log_date < since):
                continue
            refs.append(LogRef(tenant=who, log_id=log_id, log_date=state.log_date, project=state.project,
                               status=state.processing_status.value, version=state.version))
        return sorted(refs, key=lambda r: (r.log_date, r.tenant, r.log_id))

    async def read(self, ref: LogRef) -> ClaimedLog | None:
        try:
            found: DailyLogLookup = await self.client.ask(ref.tenant, GetDailyLog(id=UUID(ref.log_id)))
        except ServiceFailure as exc:
            if exc.error.code == ErrorCode.NOT_FOUND:
                return None
            raise
        if not found.found or found.log is None:
            return None
        view = found.log
        return ClaimedLog(tenant=ref.tenant, log_id=str(view.id), project=view.project,
                          log_date=view.log_date.isoformat(), turns=turns_of(view), retry_count=view.retry_count)
