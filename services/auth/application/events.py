"""Publishing auth events on the bus (the gateways listen to drop cached credentials at once)."""

from __future__ import annotations

from typing import Protocol
from uuid import UUID, uuid4

from pydantic import BaseModel

from contracts.auth import (
    GRANT_AGGREGATE,
    USER_AGGREGATE,
    AuthEventType,
    GrantRevokedState,
    UserDeactivatedState,
)
from contracts.envelope import EventEnvelope, utcnow
from contracts.subjects import Names


class EventLog(Protocol):
    async def append_event(self, subject: str, event: EventEnvelope, *, expected_last_seq: int | None) -> int: ...


class AuthEvents:
    def __init__(self, log: EventLog, names: Names) -> None:
        self.log = log
        self.names = names

    async def publish(
        self, type_: AuthEventType, *, tenant: str, aggregate: str, aggregate_id: str, data: BaseModel,
        causation_id: str, correlation_id: str | None = None, event_id: UUID | None = None,
    ) -> None:
        event = EventEnvelope(
            event_id=event_id or uuid4(), type=type_.value, occurred_at=utcnow(), tenant=tenant, aggregate=aggregate,
            aggregate_id=aggregate_id, correlation_id=correlation_id or causation_id, causation_id=causation_id,
            data=data.model_dump(mode="json"),
        )
        await self.log.append_event(self.names.event(tenant, aggregate, aggregate_id), event, expected_last_seq=None)

    async def grant_revoked(self, user_id: str, grant_id: UUID, reason: str, causation_id: str = "oauth") -> None:
        await self.publish(
            AuthEventType.TOKEN_REVOKED, tenant=user_id, aggregate=GRANT_AGGREGATE, aggregate_id=str(grant_id),
            data=GrantRevokedState(grant_id=grant_id, user_id=user_id, reason=reason), causation_id=causation_id,
        )

    async def user_deactivated(self, user_id: str, causation_id: str, event_id: UUID | None = None) -> None:
        await self.publish(
            AuthEventType.USER_DEACTIVATED, tenant=user_id, aggregate=USER_AGGREGATE, aggregate_id=user_id,
            data=UserDeactivatedState(user_id=user_id), causation_id=causation_id, event_id=event_id,
        )
