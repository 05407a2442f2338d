"""REST under /v1: the same operations as the MCP tools, with OpenAPI docs."""


import copy
import inspect
import re
import types
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError
from starlette.exceptions import HTTPException
from starlette.routing import Route
from starlette.types import Receive, Send
from starlette.types import Scope as ASGIScope

from contracts.daily_logs import (
    MAX_TOPIC_CHARS,
    MAX_TOPICS,
    MAX_TURNS,
    TEXT_NO_NUL,
    SaveDailyLog,
    SaveDailyLogResult,
    Turn,
)
from contracts.envelope import IDEMPOTENCY_KEY_PATTERN
from contracts.errors import HTTP_STATUS, ErrorBody, ErrorCode
from contracts.memory import (
    PROJECT_PATTERN,
)
from contracts.messages import spec_of
from kit.bus import validation_reply
from kit.client import ServiceFailure
from services.gateway.catalogue import OPERATIONS, Operation, ProjectRule, Rest, operation
from services.gateway.entrypoints.portability import portability_routes
from services.gateway.operations import Caller as OpCaller
from services.gateway.operations import Operations, WhoAmI
from services.gateway.pin import pinned_project
from services.gateway.principal import AccessDenied, Principal

R = TypeVar("R")
RETRY_AFTER_S = 5
M = TypeVar("M", bound=BaseModel)


class ApiError(Exception):
    def __init__(self, status: int, body: ErrorBody, headers: dict[str, str] | None = None) -> None:
        super().__init__(body.message)
        self.status = status
        self.body = body
        self.headers = headers or {}


def error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse({"error": exc.body.model_dump(mode="json")}, status_code=exc.status, headers=exc.headers)


class ErrorResponse(BaseModel):
    """Every refusal of the REST API: a stable code, a message, and the field at fault (if one is)."""

    error: ErrorBody


class RateLimitedBody(BaseModel):
    code: Literal["rate_limited"]
    message: str
    field: None = None


class RateLimitedResponse(BaseModel):
    """Too many requests for this credential (or address, before authentication); see Retry-After."""

    error: RateLimitedBody


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "The body is not JSON (invalid_argument)"},
    401: {"model": ErrorResponse, "description": "No valid bearer token (unauthenticated; see WWW-Authenticate)"},
    403: {"model": ErrorResponse, "description": "The credential lacks the scope, or may not reach the project "
          "(permission_denied)"},
    404: {"model": ErrorResponse, "description": "Nothing found by that id or key (not_found)"},
    409: {"model": ErrorResponse, "description": "A conflict, or the idempotency key's first request is still being "
          "handled (conflict, idempotency_key_in_flight)"},
    422: {"model": ErrorResponse, "description": "A field breaks a rule (invalid_argument, naming the field), or the "
          "idempotency key was used for another request (idempotency_key_reused)"},
    429: {"model": RateLimitedResponse, "description": "Rate limited: retry after Retry-After seconds"},
    503: {"model": ErrorResponse, "description": "A service is unavailable; retry later (unavailable)"},
    504: {"model": ErrorResponse, "description": "Accepted, but its outcome did not arrive in time: retry with the "
          "same idempotency key (timeout)"},
}


def _scalar(annotation: Any) -> type | None:
    """bool, int or float for such a field (optional or not), else None."""
    if annotation in (bool, int, float):
        return annotation  # type: ignore[no-any-return]
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        if len(members) == 1 and members[0] in (bool, int, float):
            return members[0]  # type: ignore[no-any-return]
    return None


def _json_number(value: Any) -> Any:
    """A number field takes a JSON number (``5.0`` is an integer, as in JSON Schema), never a
    string or a boolean (pydantic's lax mode would take ``"5"`` and ``true``)."""
    if isinstance(value, bool | str):
        raise PydanticCustomError("number_type", "Input should be a JSON number, not {kind}",
                                  {"kind": type(value).__name__.replace("str", "a string").replace("bool", "a boolean")})
    return value


def strict_body(model: type[M], name: str) -> type[M]:
    """The contract model as a REST body: booleans and numbers must be JSON booleans and numbers
    (``0`` is not ``false``, ``"3"`` not ``3``). The bus keeps the contract's lax parsing: its
    messages come from trusted services. docs/architecture.md, "REST bodies: strict types"."""
    fields: dict[str, Any] = {}
    for field_name, info in model.model_fields.items():
        kind = _scalar(info.annotation)
        if kind is not None:
            strict = copy.copy(info)
            strict.metadata = [*info.metadata, Strict() if kind is bool else BeforeValidator(_json_number)]
            fields[field_name] = (info.annotation, strict)
    made: type[M] = create_model(name, __base__=model, __doc__=model.__doc__, **fields)
    return made


def _default(info: Any, default: Any) -> Any:
    """A contract field's rules with another default (REST's own)."""
    field = copy.copy(info)
    field.default = default
    return field


HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class MethodNotAllowed:
    """405 for a method a resource does not offer, with every method it does offer in ``Allow``
    (Starlette's own answer lists only the methods of the first route matching the path)."""

    def __init__(self, allow: list[str]) -> None:
        self.allow = ", ".join(allow)

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        await JSONResponse({"detail": "Method Not Allowed"}, status_code=405,
                           headers={"Allow": self.allow})(scope, receive, send)


def _query_names(dependant: Any) -> dict[str, bool]:
    """The query parameters a route declares, its dependencies' included: name → whether it takes
    several values (a list)."""
    names = {p.alias: _takes_list(p.field_info.annotation) for p in dependant.query_params}
    for sub_dependant in dependant.dependencies:
        names |= _query_names(sub_dependant)
    return names


def _takes_list(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin in (list, tuple, set, frozenset):
        return True
    return origin in (Union, types.UnionType) and any(_takes_list(a) for a in get_args(annotation))


class RestRoute(APIRoute):
    """A route whose refusals all have the documented error body: FastAPI's own (a body it cannot
    even decode, e.g. bytes that are not UTF-8) included; a query parameter the route does not have
    is refused naming it (it used to be ignored without a word), as MCP refuses an unknown argument."""

    def get_route_handler(self) -> Any:
        handler = super().get_route_handler()
        declared = _query_names(self.dependant)

        async def handle(request: Request) -> Any:
            # an unauthenticated request is answered 401 by the route's credential first
            signed_in = isinstance(request.scope.get("user"), AuthenticatedUser)
            unknown = sorted(k for k in request.query_params if k not in declared) if signed_in else []
            if unknown:
                takes = ", ".join(sorted(declared)) or "none"
                raise ApiError(422, ErrorBody(
                    code=ErrorCode.INVALID_ARGUMENT, field=unknown[0][:64],
                    message=f"unknown query parameter {unknown[0][:64]!r}: this route takes {takes}"))
            repeated = sorted(k for k in set(request.query_params.keys()) if signed_in
                              and not declared[k] and len(request.query_params.getlist(k)) > 1)
            if repeated:  # one value is meant: FastAPI would take the last one without a word
                raise ApiError(422, ErrorBody(
                    code=ErrorCode.INVALID_ARGUMENT, field=repeated[0],
                    message=f"query parameter {repeated[0]!r} is given more than once; it takes one value"))
            try:
                return await handler(request)
            except HTTPException as exc:
                if exc.status_code != 400:
                    raise
                raise ApiError(400, ErrorBody(code=ErrorCode.INVALID_ARGUMENT, field="body",
                                              message=f"the body could not be read: {exc.detail}")) from exc
            except ValidationError as exc:  # a contract rule the request model missed: the field, never a 500
                raise ApiError(422, validation_reply(exc).error or ErrorBody(
                    code=ErrorCode.INVALID_ARGUMENT, message=str(exc))) from exc

        return handle


class SaveDailyLogRequest(strict_body(SaveDailyLog, "StrictSaveDailyLog")):  # type: ignore[misc]
    """The day's log. Over REST ``turns`` and ``topics`` are arrays only, as the document says (the
    MCP tool also takes them as plain text)."""

    project: str | None = Field(None, pattern=PROJECT_PATTERN)  # type: ignore[assignment]
    turns: Annotated[list[Turn], Field(max_length=MAX_TURNS)] | None = None  # type: ignore[assignment]
    topics: Annotated[  # type: ignore[assignment]
        list[Annotated[str, Field(min_length=1, max_length=MAX_TOPIC_CHARS, pattern=TEXT_NO_NUL)]],
        Field(max_length=MAX_TOPICS),
    ] | None = None


#: the project a request names, where a row's rule resolves it (the contract's default is the rule's own)
REQUEST_PROJECT = FieldInfo.from_annotated_attribute(str | None, Field(None, pattern=PROJECT_PATTERN))


def _path_names(path: str) -> list[str]:
    return re.findall(r"{(\w+)}", path)


def _parameter(info: FieldInfo, where: Callable[..., Any], name: str, kind: Any = inspect.Parameter.KEYWORD_ONLY
               ) -> inspect.Parameter:
    """A contract field as a path or query parameter: its type, its rules, its default, its description."""
    param = where(description=info.description)
    param.metadata = [*info.metadata]
    required = info.is_required() or where is Path  # a path parameter is always given
    default = inspect.Parameter.empty if required else info.get_default(call_default_factory=True)
    return inspect.Parameter(name, kind, default=default, annotation=Annotated[info.annotation, param])


def _request_project(op: Operation, path_fields: set[str]) -> bool:
    """Whether the request names the project the row's rule resolves (``None``: the rule decides)."""
    return op.project is ProjectRule.WRITE and "project" in op.model.model_fields and "project" not in path_fields


def _body_model(op: Operation, rest: Rest, path_fields: set[str]) -> type[BaseModel] | None:
    """A POST's or PUT's body: the contract's fields but those of the path, with its rules across
    fields (its model validators, and ``rest.rules`` for OpenAPI), REST's defaults and strict types."""
    if rest.method not in ("POST", "PUT"):
        return None
    name = rest.body or f"{op.model.__name__}Request"
    fields = {k: v for k, v in op.model.model_fields.items() if k not in path_fields}
    if not fields:
        return None
    overrides: dict[str, Any] = {k: (fields[k].annotation, _default(fields[k], v)) for k, v in rest.defaults.items()}
    if _request_project(op, path_fields):
        overrides["project"] = (str | None, REQUEST_PROJECT)
    config = ConfigDict(extra="forbid", **({"json_schema_extra": dict(rest.rules)} if rest.rules else {}))  # type: ignore[typeddict-item]
    if not path_fields:
        base: type[BaseModel] = type(op.model.__name__, (op.model,), {"__module__": op.model.__module__,
                                                                      "__doc__": op.model.__doc__,
                                                                      "model_config": config})
        return strict_body(create_model(name, __base__=base, __doc__=op.model.__doc__, **overrides), name)
    validators = {f"_{n}": model_validator(mode=d.info.mode)(d.func)  # type: ignore[call-overload]
                  for n, d in op.model.__pydantic_decorators__.model_validators.items()}
    rest_of: type[BaseModel] = create_model(f"{name}Fields", __config__=config, __validators__=validators,
                                            **({k: (v.annotation, v) for k, v in fields.items()} | overrides))
    return strict_body(rest_of, name)


def request_body(op: Operation) -> type[BaseModel] | None:
    """The body model of a row's REST route (None: it takes none)."""
    assert op.rest is not None
    return _body_model(op, op.rest, {op.rest.fields.get(n, n) for n in _path_names(op.rest.path)})


def catalogue_route(router: APIRouter, ops: Operations, op: Operation, Caller: Any, IdempotencyKey: Any,
                    call: Any) -> None:
    """The REST route of a catalogue row (``catalogue.Rest``): path parameters from the path, a GET's
    or DELETE's query parameters from the contract's other fields, a POST's or PUT's body from them
    (strict types); a command takes an ``Idempotency-Key``. The request becomes the contract model
    (its own rules decide, a refusal names the field) and runs through ``Operations.run``."""
    rest = op.rest
    assert rest is not None
    spec = spec_of(op.model)
    path_fields = {rest.fields.get(n, n): n for n in _path_names(rest.path)}  # contract field -> path parameter
    model_fields = op.model.model_fields
    parameters = [_parameter(model_fields[f], Path, n) for f, n in path_fields.items()]
    parameters.append(inspect.Parameter("who", inspect.Parameter.KEYWORD_ONLY, annotation=Caller))
    body = _body_model(op, rest, set(path_fields))
    request_project = _request_project(op, set(path_fields))
    if body is not None:
        parameters.insert(0 if rest.optional_body else len(path_fields), inspect.Parameter(
            "body", inspect.Parameter.KEYWORD_ONLY, annotation=body | None if rest.optional_body else body,
            default=None if rest.optional_body else inspect.Parameter.empty))
    elif rest.method in ("GET", "DELETE"):
        queries = [f for f in model_fields if f not in path_fields]
        queries.sort(key=lambda f: f == "project")  # the project filter last, as the routes have always listed it
        parameters += [_parameter(REQUEST_PROJECT if f == "project" and request_project
                                  else model_fields[f], Query, f) for f in queries]
    if spec.kind == "command":
        parameters.append(inspect.Parameter("idempotency_key", inspect.Parameter.KEYWORD_ONLY, default=None,
                                            annotation=IdempotencyKey))
    parameters.sort(key=lambda p: p.default is not inspect.Parameter.empty)

    async def endpoint(**arguments: Any) -> Any:
        who, key, given = arguments.pop("who"), arguments.pop("idempotency_key", None), arguments.pop("body", None)
        values = dict(rest.defaults) | {field: arguments.pop(name) for field, name in path_fields.items()} | arguments
        if given is not None:
            values |= given.model_dump(exclude_unset=True)
        project = values.pop("project", None) if request_project else None
        message = op.model.model_validate(values)
        project = project if request_project else getattr(message, "project", None)
        return await call(ops.run(who, op, message, project=project, key=key))

    endpoint.__name__ = endpoint.__qualname__ = rest.name
    endpoint.__doc__ = rest.doc
    endpoint.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    router.add_api_route(rest.path, endpoint, methods=[rest.method], status_code=rest.status,
                         response_model=spec.result, summary=rest.summary, tags=list(rest.tags) or None,
                         responses=dict(rest.responses) or None)


def build_router(ops: Operations, unauthorized: Any) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["memory"], responses=ERROR_RESPONSES, route_class=RestRoute)

    def caller(request: Request) -> OpCaller:
        user = request.scope.get("user")
        if not isinstance(user, AuthenticatedUser):
            raise unauthorized(request)
        return OpCaller(Principal.from_token(user.access_token), pinned_project.get())

    Caller = Annotated[OpCaller, Depends(caller)]
    IdempotencyKey = Annotated[
        Annotated[str, Field(pattern=IDEMPOTENCY_KEY_PATTERN)] | SkipJsonSchema[None],  # a header is never null
        Header(alias="Idempotency-Key",
               description="Retrying with the same key has exactly one effect; the same key with a different "
               "request is refused (422 idempotency_key_reused), and while its first request is still being "
               "handled the answer is 409 idempotency_key_in_flight."),
    ]

    async def call(coro: Awaitable[R]) -> R:
        """Run an operation; a refusal becomes the HTTP status of its error code."""
        try:
            return await coro
        except ServiceFailure as exc:
            status = HTTP_STATUS[exc.error.code]
            # 202: accepted while the owning service is down (applied when it is back); 503: nothing
            # could be done now. Either way the client learns when to try again.
            retry = {"Retry-After": str(RETRY_AFTER_S)} if status in (202, 503) else None
            raise ApiError(status, exc.error, retry) from exc
        except AccessDenied as exc:
            if exc.scope is None:  # outside the credential's project, or more than it holds
                raise ApiError(403, ErrorBody(code=ErrorCode.PERMISSION_DENIED, message=str(exc), field=exc.field)) from exc
            # RFC 6750 §3.1: insufficient_scope, naming the scope needed.
            challenge = f'Bearer error="insufficient_scope", scope="{exc.scope}", error_description="{exc}"'
            raise ApiError(403, ErrorBody(code=ErrorCode.PERMISSION_DENIED, message=str(exc)),
                           {"WWW-Authenticate": challenge}) from exc

    for add in (_catalogue_routes, _hand_written_routes, portability_routes):
        add(router, ops, Caller, IdempotencyKey, call)
    _method_not_allowed(router)
    return router


def _hand_written_routes(router: APIRouter, ops: Operations, Caller: Any, IdempotencyKey: Any, call: Any) -> None:
    """The two routes that are no row's REST route: who am I (the credential's own, no service asked)
    and the day's log (its turns and topics arrays only, where the contract also takes plain text)."""

    @router.get("/whoami", response_model=WhoAmI, summary="Who am I")
    async def whoami(who: Caller) -> WhoAmI:
        return await call(ops.who_am_i(who))

    @router.post("/daily-logs", response_model=SaveDailyLogResult, tags=["daily logs"], summary="Save the day's log",
                 responses={413: {"description": "The body is larger than the gateway accepts (a day's turns are "
                                                 "limited to 200,000 characters in all)"}})
    async def save_daily_log(body: SaveDailyLogRequest, who: Caller, idempotency_key: IdempotencyKey = None) -> Any:
        """One log per project and day: saving the same day again updates the fields given and never queues a
        processed log again. Needs `memory:write`; every other daily-log route needs `memory:maintenance`."""
        cmd = SaveDailyLog.model_validate(body.model_dump(exclude_none=True, exclude={"project"}))
        return await call(ops.run(who, operation(SaveDailyLog), cmd, project=body.project, key=idempotency_key))


def _catalogue_routes(router: APIRouter, ops: Operations, Caller: Any, IdempotencyKey: Any, call: Any) -> None:
    """The routes of the catalogue's rows (``catalogue.py``), in its order."""
    for op in OPERATIONS:
        if op.rest is not None:
            catalogue_route(router, ops, op, Caller, IdempotencyKey, call)


def _method_not_allowed(router: APIRouter) -> None:
    """A method a resource does not take is a 405 naming all of the resource's methods."""
    # Last: any other method on a resource is a 405 naming all of the resource's methods.
    allowed: dict[str, set[str]] = {}
    for route in router.routes:
        if isinstance(route, Route) and route.methods:
            allowed.setdefault(route.path, set()).update(route.methods)
    for path, methods in allowed.items():
        router.routes.append(Route(path, MethodNotAllowed(sorted(methods)), include_in_schema=False))
    # ... and first, for a fixed path: another method on it is never taken for an id of a path
    # with a parameter beside it (GET /daily-logs/reconcile is a 405, not GET /daily-logs/{log_id})
    router.routes[:0] = [
        Route(path, MethodNotAllowed(sorted(methods)), methods=sorted(HTTP_METHODS - methods), include_in_schema=False)
        for path, methods in allowed.items() if "{" not in path
    ]

