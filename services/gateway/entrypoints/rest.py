"""REST under /v1: the same operations as the MCP tools, with OpenAPI docs."""


from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from pydantic import BaseModel, ConfigDict, Field, model_validator

from contracts.auth import Scope
from contracts.errors import HTTP_STATUS, ErrorBody, ErrorCode
from contracts.memory import (
    MAX_CONTENT_CHARS,
    MAX_QUERY_CHARS,
    PROJECT_PATTERN,
    ForgetMemoryResult,
    RecallMode,
    RecallResult,
    SaveMemoryResult,
)
from services.gateway.adapters.backend import Backend, BackendError
from services.gateway.principal import AccessDenied, Principal


class ApiError(Exception):
    def __init__(self, status: int, body: ErrorBody, headers: dict[str, str] | None = None) -> None:
        super().__init__(body.message)
        self.status = status
        self.body = body
        self.headers = headers or {}


def error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse({"error": exc.body.model_dump(mode="json")}, status_code=exc.status, headers=exc.headers)


class SaveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    project: str | None = Field(None, pattern=PROJECT_PATTERN)


class ForgetRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str | None = Field(None, min_length=1, max_length=MAX_CONTENT_CHARS)
    memory_id: UUID | None = None
    project: str | None = Field(None, pattern=PROJECT_PATTERN)
    reason: str | None = Field(None, max_length=1000)

    @model_validator(mode="after")
    def _one_target(self) -> "ForgetRequest":
        if (self.content is None) == (self.memory_id is None):
            raise ValueError("give exactly one of content or memory_id")
        return self


class RecallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    project: str | None = Field(None, pattern=PROJECT_PATTERN)
    limit: int = Field(10, ge=1, le=100)
    mode: RecallMode = RecallMode.HYBRID


class WhoAmI(BaseModel):
    user_id: str
    client_id: str
    key_id: str | None
    scopes: list[str]
    project: str | None


def build_router(backend: Backend, unauthorized: Any) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["memory"])

    def caller(request: Request) -> Principal:
        user = request.scope.get("user")
        if not isinstance(user, AuthenticatedUser):
            raise unauthorized()
        return Principal.from_token(user.access_token)

    Caller = Annotated[Principal, Depends(caller)]
    IdempotencyKey = Annotated[
        str | None,
        Header(alias="Idempotency-Key", pattern=r"^[A-Za-z0-9_.:-]{8,128}$",
               description="Retrying with the same key has exactly one effect."),
    ]

    async def call(coro: Any) -> Any:
        try:
            return await coro
        except BackendError as exc:
            raise ApiError(HTTP_STATUS[exc.error.code], exc.error) from exc

    def guard(who: Principal, scope: Scope) -> None:
        try:
            who.require(scope)
        except AccessDenied as exc:
            raise ApiError(403, ErrorBody(code=ErrorCode.PERMISSION_DENIED, message=str(exc))) from exc

    def project_of(who: Principal, requested: str | None, search: bool = False) -> str | None:
        try:
            return who.search_project(requested) if search else who.project_for(requested)
        except AccessDenied as exc:
            raise ApiError(403, ErrorBody(code=ErrorCode.PERMISSION_DENIED, message=str(exc), field="project")) from exc

    @router.post("/memories", status_code=201, response_model=SaveMemoryResult, summary="Save a memory")
    async def save(body: SaveRequest, who: Caller, idempotency_key: IdempotencyKey = None) -> Any:
        """Save a memory. The same content saved again in the same project is not duplicated."""
        guard(who, Scope.MEMORY_WRITE)
        payload = {"project": project_of(who, body.project), "content": body.content, "source": "api"}
        return await call(backend.save_memory(who.tenant, payload, idempotency_key))

    @router.post("/memories/forget", response_model=ForgetMemoryResult, summary="Forget a memory")
    async def forget(body: ForgetRequest, who: Caller, idempotency_key: IdempotencyKey = None) -> Any:
        """Forget by id, or by content (exact match, then semantic similarity ≥ 0.85)."""
        guard(who, Scope.MEMORY_WRITE)
        payload = body.model_dump(mode="json", exclude_none=True)
        payload["project"] = project_of(who, body.project)
        return await call(backend.forget_memory(who.tenant, payload, idempotency_key))

    @router.post("/recall", response_model=RecallResult, summary="Recall memories")
    async def recall(body: RecallRequest, who: Caller) -> Any:
        """Hybrid search (dense + keyword, RRF) over the caller's memories."""
        guard(who, Scope.MEMORY_READ)
        payload = body.model_dump(mode="json")
        payload["project"] = project_of(who, body.project, search=True)
        return await call(backend.recall(who.tenant, payload))

    @router.get("/whoami", response_model=WhoAmI, summary="Who am I")
    async def whoami(who: Caller) -> WhoAmI:
        return WhoAmI(
            user_id=who.tenant, client_id=who.client_id, key_id=who.key_id,
            scopes=sorted(who.scopes), project=who.project,
        )

    return router
