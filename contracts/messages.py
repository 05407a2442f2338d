"""Typed messages: every command and query names itself, the service that owns it and its result.

A contract model becomes a message with a decorator::

    @command(MEMORY, "save_memory", result=SaveMemoryResult)
    class SaveMemory(BaseModel): ...

``spec_of(SaveMemory)`` then tells a caller where to send it and how to read the answer, and a
service registers its handlers by model (``{SaveMemory: memories.save}``); ``kit`` dispatches, so
no string names a handler anywhere. The name is the wire name (the subject token and the
envelope's ``type``): it never changes once published.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

Kind = Literal["command", "query"]
M = TypeVar("M", bound=type[BaseModel])


@dataclass(frozen=True)
class MessageSpec:
    """Where a message goes and what comes back."""

    kind: Kind
    service: str
    name: str
    model: type[BaseModel]
    result: type[BaseModel]
    #: a command that carries the states its events will hold, whole (an import's restore): its
    #: events add nothing to it, so it may fill more of a bus message than a command whose events
    #: add ids, versions and times to what it says (every state accepted must be restorable)
    restores: bool = False


#: (kind, service, name) -> spec, filled as contract modules are imported.
REGISTRY: dict[tuple[Kind, str, str], MessageSpec] = {}
_SPEC_ATTR = "__engram_message__"


def _register(kind: Kind, service: str, name: str, result: type[BaseModel], restores: bool = False) -> Any:
    def decorate(model: M) -> M:
        key = (kind, service, name)
        if key in REGISTRY and REGISTRY[key].model is not model:
            raise ValueError(f"{kind} {service}.{name} is declared twice")
        spec = MessageSpec(kind=kind, service=service, name=name, model=model, result=result, restores=restores)
        REGISTRY[key] = spec
        setattr(model, _SPEC_ATTR, spec)
        return model

    return decorate


def command(service: str, name: str, *, result: type[BaseModel], restores: bool = False) -> Any:
    """Declare a command (a request to change state), owned by ``service`` (``restores``: see
    :attr:`MessageSpec.restores`)."""
    return _register("command", service, name, result, restores)


def query(service: str, name: str, *, result: type[BaseModel]) -> Any:
    """Declare a query (a read), answered by ``service``."""
    return _register("query", service, name, result)


def spec_of(message: BaseModel | type[BaseModel]) -> MessageSpec:
    """The spec of a message model (or instance); a model that is no message is a programming error."""
    model = message if isinstance(message, type) else type(message)
    spec = model.__dict__.get(_SPEC_ATTR)
    if spec is None:
        raise TypeError(f"{model.__name__} is not a declared command or query")
    return spec  # type: ignore[no-any-return]


def load_all() -> None:
    """Import every contract module, so that the registries know every message and every aggregate
    (``contracts.events``)."""
    import contracts.auth  # noqa: F401
    import contracts.daily_logs  # noqa: F401
    import contracts.extraction_modes  # noqa: F401
    import contracts.graph  # noqa: F401
    import contracts.memory  # noqa: F401
    import contracts.portability  # noqa: F401


def messages_of(service: str, kind: Kind) -> dict[str, MessageSpec]:
    """Every declared message of one kind that ``service`` owns, by wire name."""
    return {name: spec for (k, s, name), spec in REGISTRY.items() if k == kind and s == service}


# idempotency ------------------------------------------------------------------------------------
def scoped_command_id(tenant: str, operation: str, key: str) -> str:
    """The identity of one idempotent request: a client's key means something only within one
    tenant and one operation, so equal keys of two users (or of two operations) never meet — not
    as a bus message id, not as a stored outcome, not in the ids derived from it."""
    digest = hashlib.sha256(f"{tenant}\x00{operation}\x00{key}".encode()).hexdigest()
    return f"c{digest[:40]}"


def fingerprint(message: BaseModel) -> str:
    """A digest of the request as parsed (defaults filled in, fields in declaration order), stored
    with its outcome: the same key sent again with another request is refused, never answered with
    the first request's outcome."""
    return hashlib.sha256(message.model_dump_json().encode()).hexdigest()[:32]
