"""The service skeleton: handler tables for typed commands and queries, dispatched here once.

A service declares what it handles::

    runtime = ServiceRuntime(MEMORY, commands={SaveMemory: memories.save, …},
                             queries={Recall: recall.recall, …}, log=PgCommandLog(pool, schema))

and ``kit`` does the rest, the same way for every service: parse each message once into its
contract model, run its handler exactly once per (tenant, operation, idempotency key), refuse a
key reused with another request, record the outcome in one place, reply to the waiting caller,
answer the outcome query for callers whose reply was lost, and dead-letter what can never be
handled. Handlers receive a :class:`Call` (who asks, within which project) and the model, and
return the contract's result model or raise :class:`contracts.errors.ServiceError`. A handler that
changes an event-sourced aggregate does it through :mod:`kit.aggregates`, which records the outcome
in the transaction of the effect (the runtime then records nothing more).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from nats.aio.msg import Msg
from pydantic import BaseModel, ValidationError

from contracts.envelope import CommandEnvelope, OutcomeQuery, QueryEnvelope, Reply
from contracts.errors import ErrorCode, ServiceError
from contracts.messages import MessageSpec, fingerprint, scoped_command_id, spec_of
from kit import metrics
from kit.bus import OUTCOME_QUERY, Bus, reply_to, validation_reply
from kit.command_log import OutcomeRecord, StoredOutcome

log = logging.getLogger("engram.service")

_HINTS_MAX = 16_384
#: a fetched batch of at most this many commands is prepared beside its outcome lookup (ServiceRuntime.prime)
PREPARE_BESIDE_LOOKUP = 4


@dataclass
class Call:
    """Who asks, and the only project they may reach (None: every project of the tenant)."""

    tenant: str
    correlation_id: str
    project_scope: str | None = None

    def require_project(self, project: str, field: str = "project") -> None:
        """Refuse a request naming a project outside the caller's scope."""
        if self.project_scope is not None and project != self.project_scope:
            raise ServiceError(
                f"this credential or connection is restricted to project '{self.project_scope}'",
                field, code=ErrorCode.PERMISSION_DENIED,
            )

    def search_project(self, requested: str | None, field: str = "project") -> str | None:
        """The project a search runs in: the request's (when allowed), else the scope's, else all."""
        if requested is None:
            return self.project_scope
        self.require_project(requested, field)
        return requested

    def sees(self, project: str) -> bool:
        """Whether a thing found by id or content lies within reach (callers say 'not found' when
        it does not, so that nothing outside the scope is revealed to exist)."""
        return self.project_scope is None or project == self.project_scope


@dataclass
class CommandCall(Call):
    """A command's call: its idempotency identity, and what to keep as its outcome."""

    operation: str = ""
    key: str = ""
    command_id: str = ""  # scoped_command_id(tenant, operation, key): derive ids from this
    fingerprint: str = ""
    #: kept for retries instead of the result, when the result holds something shown once (a secret)
    stored_result: BaseModel | None = None
    #: the outcome recorded in the transaction of the command's effect (kit's write path,
    #: :mod:`kit.aggregates`): the runtime then records none
    _kept: OutcomeRecord | None = field(default=None, init=False, repr=False)

    def outcome(self, result: BaseModel) -> OutcomeRecord:
        """The record of a successful outcome, to be recorded in the transaction of the effect."""
        return self._record(Reply.success(result.model_dump(mode="json")))

    def kept(self, outcome: OutcomeRecord) -> None:
        """Note that ``outcome`` was recorded with the effect (kit's write path says so, once its
        transaction committed)."""
        self._kept = outcome

    def _record(self, reply: Reply[Any]) -> OutcomeRecord:
        return OutcomeRecord(self.command_id, self.tenant, self.operation, self.key, self.fingerprint, reply)


CommandHandler = Callable[[CommandCall, Any], Awaitable[BaseModel]]
QueryHandler = Callable[[Call, Any], Awaitable[BaseModel]]
Prepare = Callable[[Sequence[tuple[CommandCall, BaseModel]]], Awaitable[None]]


class CommandLog(Protocol):
    async def find(self, command_id: str) -> StoredOutcome | None: ...
    async def known(self, command_ids: Sequence[str]) -> set[str]: ...
    async def record(self, outcome: OutcomeRecord) -> None: ...


def _labels(service: str, kind: str, operation: str, reply: Reply[Any] | None) -> dict[str, str]:
    """The handler histogram's labels (operations are the service's own names: bounded cardinality)."""
    if reply is None:
        outcome = "exception"
    elif reply.ok:
        outcome = "ok"
    else:
        outcome = reply.error.code.value if reply.error else "error"
    return {"service": service, "kind": kind, "operation": operation, "outcome": outcome}


def key_reused(operation: str, key: str, stored: StoredOutcome) -> Reply[Any]:
    """The answer to a key sent again with another request (IETF Idempotency-Key draft: 422)."""
    return Reply.failure(
        ErrorCode.IDEMPOTENCY_KEY_REUSED,
        f"the idempotency key {key!r} was already used for a different {operation} request "
        f"(at {stored.recorded_at.isoformat(timespec='seconds')}); a new request needs a new key",
        "idempotency_key",
    )


@dataclass
class _Parsed:
    call: CommandCall
    model: BaseModel


@dataclass
class ServiceRuntime:
    """Dispatch, idempotency, outcomes and replies for one service's commands and queries."""

    service: str
    commands: Mapping[type[BaseModel], CommandHandler]
    queries: Mapping[type[BaseModel], QueryHandler]
    command_log: CommandLog
    tenant_required: bool = True
    _commands: dict[str, tuple[MessageSpec, CommandHandler]] = field(init=False)
    _queries: dict[str, tuple[MessageSpec, QueryHandler]] = field(init=False)
    _fresh: set[str] = field(init=False, default_factory=set)
    #: commands parsed while their batch was prepared, by stream sequence (a redelivery has the same)
    _parsed: dict[Hashable, _Parsed | ServiceError | ValidationError] = field(init=False, default_factory=dict)
    #: event-loop time when a handler last ran a command (queries and answers of a stored outcome
    #: do not count): a service can tell when writes pause
    last_command: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self._commands = self._table(self.commands, "command")
        self._queries = self._table(self.queries, "query")

    def _table(self, handlers: Mapping[type[BaseModel], Any], kind: str) -> dict[str, Any]:
        table = {}
        for model, handler in handlers.items():
            spec = spec_of(model)
            if spec.kind != kind or spec.service != self.service:
                raise ValueError(f"{model.__name__} is a {spec.kind} of {spec.service}, not a {kind} of {self.service}")
            table[spec.name] = (spec, handler)
        return table

    # commands -----------------------------------------------------------------------------
    def parse_command(self, env: CommandEnvelope) -> _Parsed:
        """The envelope's command as its contract model, with its call (raises ServiceError or
        ValidationError)."""
        found = self._commands.get(env.type)
        if found is None:
            raise ServiceError(f"unknown command {env.type!r} for the {self.service} service: use one of "
                               f"{', '.join(sorted(self._commands))}", "type")
        spec = found[0]
        model = spec.model.model_validate(env.payload)
        call = CommandCall(
            tenant=env.tenant, correlation_id=env.correlation_id, project_scope=env.project_scope,
            operation=spec.name, key=env.command_id,
            command_id=scoped_command_id(env.tenant, spec.name, env.command_id), fingerprint=fingerprint(model),
        )
        return _Parsed(call, model)

    async def handle_command(self, env: CommandEnvelope, parsed: _Parsed | None = None) -> Reply[Any]:
        """Run one command exactly once per (tenant, operation, key) and return its outcome
        (timed by operation and outcome: ``engram_handler_duration_seconds``)."""
        reply: Reply[Any] | None = None
        with metrics.timed(metrics.HANDLER_SECONDS, lambda: _labels(self.service, "command", env.type if env.type in self._commands else "unknown", reply)):
            reply = await self._handle_command(env, parsed)
        return reply

    async def _handle_command(self, env: CommandEnvelope, parsed: _Parsed | None) -> Reply[Any]:
        try:
            parsed = parsed or self.parse_command(env)
        except ValidationError as exc:
            return validation_reply(exc)  # nothing happened: nothing to keep
        except ServiceError as exc:
            return Reply.failure(exc.code, exc.message, exc.field)
        call, model = parsed.call, parsed.model
        if call.command_id in self._fresh:
            self._fresh.discard(call.command_id)
        else:
            stored = await self.command_log.find(call.command_id)
            if stored is not None:
                if stored.fingerprint != call.fingerprint:
                    return key_reused(call.operation, call.key, stored)
                return stored.reply
        handler = self._commands[call.operation][1]
        self.last_command = asyncio.get_running_loop().time()
        try:
            result = await handler(call, model)
            reply = Reply.success(result.model_dump(mode="json"))
            kept = call._record(Reply.success(call.stored_result.model_dump(mode="json"))) \
                if call.stored_result is not None else call._record(reply)
        except ServiceError as exc:
            reply = Reply.failure(exc.code, exc.message, exc.field)
            kept = call._record(reply)
        except ValidationError as exc:
            reply = validation_reply(exc)
            kept = call._record(reply)
        if call._kept is None:
            await self.command_log.record(kept)
        return reply

    async def prime(self, envs: Sequence[tuple[Hashable, CommandEnvelope]], prepare: Prepare | None = None) -> None:
        """Prepare a fetched batch: parse each command once, learn with one query which have no
        outcome yet (each then skips its own lookup), and let the service prepare the batch
        (e.g. embed every text in one call)."""
        batch: list[_Parsed] = []
        for ident, env in envs:
            try:
                parsed: _Parsed | ServiceError | ValidationError = self.parse_command(env)
            except (ServiceError, ValidationError) as exc:
                parsed = exc
            if len(self._parsed) > _HINTS_MAX:  # (entries of messages never handled: a stop mid-batch)
                self._parsed.clear()
            self._parsed[ident] = parsed
            if isinstance(parsed, _Parsed):
                batch.append(parsed)
        ids = [p.call.command_id for p in batch]
        if prepare is not None and len(batch) <= PREPARE_BESIDE_LOOKUP:
            # a command or two (a person's or an assistant's write, waiting): prepared while the
            # outcomes are looked up, not after (a retried one is then prepared for nothing); a bulk
            # batch waits for the lookup, so that a redelivered import is not prepared again
            known, _ = await asyncio.gather(self.command_log.known(ids), prepare([(p.call, p.model) for p in batch]))
            prepare = None
        else:
            known = await self.command_log.known(ids)
        if len(self._fresh) > _HINTS_MAX:
            self._fresh.clear()
        self._fresh.update(i for i in ids if i not in known)
        if prepare is not None:
            await prepare([(p.call, p.model) for p in batch if p.call.command_id not in known])

    async def _on_command(self, bus: Bus, msg: Msg) -> None:
        env = CommandEnvelope.model_validate_json(msg.data)
        primed = self._parsed.pop(msg.metadata.sequence.stream, None)
        if isinstance(primed, ServiceError | ValidationError):
            primed = None  # handle_command answers it
        reply = await self.handle_command(env, primed)
        await reply_to(bus, msg, reply)

    def start_commands(
        self, bus: Bus, stop: asyncio.Event, *, prepare: Prepare | None = None, concurrency: int = 1,
    ) -> asyncio.Task[None]:
        """Consume the service's commands until ``stop`` is set."""

        async def on_dead(msg: Msg, reason: str) -> None:
            self._parsed.pop(msg.metadata.sequence.stream, None)
            await reply_to(bus, msg, Reply.failure(
                ErrorCode.INTERNAL, f"the command could not be handled and was dead-lettered: {reason}"))

        async def primed(msgs: list[Msg]) -> None:
            envs = []
            for msg in msgs:
                try:
                    envs.append((msg.metadata.sequence.stream, CommandEnvelope.model_validate_json(msg.data)))
                except ValueError:
                    continue
            await self.prime(envs, prepare)

        return asyncio.create_task(bus.consume(
            bus.names.command_consumer(self.service), lambda msg: self._on_command(bus, msg), stop,
            on_dead=on_dead, prepare=primed, concurrency=concurrency,
        ))

    # queries ------------------------------------------------------------------------------
    async def handle_query(self, env: QueryEnvelope) -> Reply[Any]:
        """Answer one query (or the outcome query of a command), timed by operation and outcome."""
        reply: Reply[Any] | None = None
        with metrics.timed(metrics.HANDLER_SECONDS, lambda: _labels(self.service, "query", env.type if env.type in self._queries or env.type == OUTCOME_QUERY
                                                  else "unknown", reply)):
            reply = await self._handle_query(env)
        return reply

    async def _handle_query(self, env: QueryEnvelope) -> Reply[Any]:
        if self.tenant_required and not env.tenant:
            return Reply.failure(ErrorCode.INVALID_ARGUMENT, "tenant is required", "tenant")
        if env.type == OUTCOME_QUERY:
            return await self._outcome(env)
        found = self._queries.get(env.type)
        if found is None:
            return Reply.failure(ErrorCode.INVALID_ARGUMENT, f"unknown query {env.type!r} for the {self.service} "
                                 f"service", "type")
        spec, handler = found
        try:
            result = await handler(Call(env.tenant or "", env.correlation_id, env.project_scope),
                                   spec.model.model_validate(env.payload))
        except ValidationError as exc:
            return validation_reply(exc)
        except ServiceError as exc:
            return Reply.failure(exc.code, exc.message, exc.field)
        return Reply.success(result.model_dump(mode="json"))

    async def _outcome(self, env: QueryEnvelope) -> Reply[Any]:
        """The stored outcome of (tenant, operation, key), if the request matches the one it answered."""
        try:
            outcome = OutcomeQuery.model_validate(env.payload)
        except ValidationError as exc:
            return validation_reply(exc)
        stored = await self.command_log.find(scoped_command_id(env.tenant or "", outcome.operation, outcome.key))
        if stored is None:
            return Reply.failure(ErrorCode.NOT_FOUND, f"no outcome yet for {outcome.operation} with this key")
        if outcome.fingerprint is not None and outcome.fingerprint != stored.fingerprint:
            return key_reused(outcome.operation, outcome.key, stored)
        return Reply.success({"outcome": stored.reply.model_dump(mode="json")})

    async def serve_queries(self, bus: Bus, *, concurrency: int = 16) -> list[Any]:
        """Answer every query of the service (and the outcome query) in its queue group."""
        names = [*self._queries, OUTCOME_QUERY]
        return await bus.serve_queries(self.service, dict.fromkeys(names, self.handle_query), concurrency=concurrency)

