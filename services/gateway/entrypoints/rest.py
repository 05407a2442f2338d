"""REST under /v1: the same operations as the MCP tools, with OpenAPI docs."""


from collections.abc import Awaitable
from typing import Annotated, Any, TypeVar
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from pydantic import BaseModel, ConfigDict, Field, model_validator

from contracts.auth import ApiKeyList, ApiKeyView, CreateApiKey, CreatedApiKey, ListApiKeys, RevokeApiKey
from contracts.envelope import IDEMPOTENCY_KEY_PATTERN
from contracts.errors import HTTP_STATUS, ErrorBody, ErrorCode
from contracts.memory import (
    MAX_CONTENT_CHARS,
    MAX_KEYWORD_CHARS,
    MAX_RECALL_LIMIT,
    MAX_TITLE_CHARS,
    MEMORY_KEY_PATTERN,
    PROJECT_PATTERN,
    Category,
    ForgetMemory,
    ForgetMemoryResult,
    GetMemoryByKey,
    GetProfile,
    GetSharedMemories,
    MemoryHistory,
    MemoryHistoryQuery,
    MemoryList,
    MemoryLookup,
    Profile,
    ProjectList,
    Recall,
    RecallMemory,
    RecallResult,
    SaveMemory,
    SaveMemoryResult,
    SaveSharedMemory,
    SaveSharedMemoryResult,
    SharedMemoryList,
    UpdateMemory,
)
from kit.client import ServiceFailure
from services.gateway.operations import Caller as OpCaller
from services.gateway.operations import Operations, WhoAmI
from services.gateway.pin import pinned_project
from services.gateway.principal import AccessDenied, Principal

R = TypeVar("R")


class ApiError(Exception):
    def __init__(self, status: int, body: ErrorBody, headers: dict[str, str] | None = None) -> None:
        super().__init__(body.message)
        self.status = status
        self.body = body
        self.headers = headers or {}


def error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse({"error": exc.body.model_dump(mode="json")}, status_code=exc.status, headers=exc.headers)


class SaveRequest(SaveMemory):
    """Free-form (content only) or categorised (category, optional memory_key) memory."""

    project: str | None = Field(None, pattern=PROJECT_PATTERN)  # type: ignore[assignment]
    source: str = Field("api", min_length=1, max_length=64)


class UpdateRequest(UpdateMemory):
    project: str | None = Field(None, pattern=PROJECT_PATTERN)  # type: ignore[assignment]


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


def build_router(ops: Operations, unauthorized: Any) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["memory"])

    def caller(request: Request) -> OpCaller:
        user = request.scope.get("user")
        if not isinstance(user, AuthenticatedUser):
            raise unauthorized(request)
        return OpCaller(Principal.from_token(user.access_token), pinned_project.get())

    Caller = Annotated[OpCaller, Depends(caller)]
    IdempotencyKey = Annotated[
        str | None,
        Header(alias="Idempotency-Key", pattern=IDEMPOTENCY_KEY_PATTERN,
               description="Retrying with the same key has exactly one effect; the same key with a different "
               "request is refused (422 idempotency_key_reused), and while its first request is still being "
               "handled the answer is 409 idempotency_key_in_flight."),
    ]

    async def call(coro: Awaitable[R]) -> R:
        """Run an operation; a refusal becomes the HTTP status of its error code."""
        try:
            return await coro
        except ServiceFailure as exc:
            raise ApiError(HTTP_STATUS[exc.error.code], exc.error) from exc
        except AccessDenied as exc:
            if exc.scope is None:  # outside the credential's project
                raise ApiError(403, ErrorBody(code=ErrorCode.PERMISSION_DENIED, message=str(exc), field="project")) from exc
            # RFC 6750 §3.1: insufficient_scope, naming the scope needed.
            challenge = f'Bearer error="insufficient_scope", scope="{exc.scope}", error_description="{exc}"'
            raise ApiError(403, ErrorBody(code=ErrorCode.PERMISSION_DENIED, message=str(exc)),
                           {"WWW-Authenticate": challenge}) from exc

    @router.post("/memories", status_code=201, response_model=SaveMemoryResult, summary="Save a memory")
    async def save(body: SaveRequest, who: Caller, idempotency_key: IdempotencyKey = None) -> Any:
        """Save a memory. The same content saved again in the same project is not duplicated."""
        cmd = SaveMemory.model_validate(body.model_dump(exclude_none=True, exclude={"project"}))
        return await call(ops.save_memory(who, cmd, project=body.project, key=idempotency_key))

    @router.post("/memories/update", response_model=SaveMemoryResult, summary="Update a memory (new version)")
    async def update(body: UpdateRequest, who: Caller, idempotency_key: IdempotencyKey = None) -> Any:
        """Write a new version of a memory found by id or memory_key."""
        cmd = UpdateMemory.model_validate(body.model_dump(exclude_none=True, exclude={"project"}))
        return await call(ops.update_memory(who, cmd, project=body.project, key=idempotency_key))

    @router.get("/memories/by-key", response_model=MemoryLookup, summary="Get a memory by memory_key")
    async def by_key(
        who: Caller,
        memory_key: Annotated[str, Query(pattern=MEMORY_KEY_PATTERN, max_length=80)],
        project: Annotated[str | None, Query(pattern=PROJECT_PATTERN)] = None,
    ) -> Any:
        return await call(ops.get_memory_by_key(who, GetMemoryByKey(memory_key=memory_key), project=project))

    @router.get("/memories", response_model=MemoryList, summary="List memories by category and/or keyword")
    async def list_memories(
        who: Caller,
        category: Category | None = None,
        keyword: Annotated[str | None, Query(min_length=1, max_length=MAX_KEYWORD_CHARS)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_RECALL_LIMIT)] = 20,
        project: Annotated[str | None, Query(pattern=PROJECT_PATTERN)] = None,
    ) -> Any:
        query = RecallMemory(project=project, category=category, keyword=keyword, limit=limit)
        return await call(ops.recall_memory(who, query))

    @router.get("/memories/{memory_id}/history", response_model=MemoryHistory, summary="A memory's versions")
    async def history(memory_id: UUID, who: Caller) -> Any:
        """Every version from the event log, oldest first, each with when it stopped being true."""
        return await call(ops.memory_history(who, MemoryHistoryQuery(memory_id=memory_id)))

    @router.post("/shared-memories", response_model=SaveSharedMemoryResult, summary="Save a shared memory")
    async def save_shared(body: SaveSharedMemory, who: Caller, idempotency_key: IdempotencyKey = None) -> Any:
        """Idempotent per title: the same title again updates it."""
        return await call(ops.save_shared_memory(who, body, key=idempotency_key))

    @router.get("/shared-memories", response_model=SharedMemoryList, summary="Find shared memories")
    async def get_shared(
        who: Caller,
        title: Annotated[str | None, Query(min_length=1, max_length=MAX_TITLE_CHARS)] = None,
        keyword: Annotated[str | None, Query(min_length=1, max_length=MAX_KEYWORD_CHARS)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_RECALL_LIMIT)] = 20,
    ) -> Any:
        return await call(ops.get_shared_memories(who, GetSharedMemories(title=title, keyword=keyword, limit=limit)))

    @router.get("/projects", response_model=ProjectList, summary="List projects")
    async def projects(who: Caller) -> Any:
        return await call(ops.list_projects(who))

    @router.get("/profile", response_model=Profile, summary="The user's profile")
    async def profile(who: Caller, project: Annotated[str | None, Query(pattern=PROJECT_PATTERN)] = None) -> Any:
        return await call(ops.profile(who, GetProfile(project=project)))

    @router.post("/memories/forget", response_model=ForgetMemoryResult, summary="Forget a memory")
    async def forget(body: ForgetRequest, who: Caller, idempotency_key: IdempotencyKey = None) -> Any:
        """Forget by id, or by content (exact match, then semantic similarity ≥ 0.85)."""
        cmd = ForgetMemory.model_validate(body.model_dump(exclude_none=True, exclude={"project"}))
        return await call(ops.forget_memory(who, cmd, project=body.project, key=idempotency_key))

    @router.post("/recall", response_model=RecallResult, summary="Recall memories")
    async def recall(body: Recall, who: Caller) -> Any:
        """Hybrid search (dense + keyword, RRF; its best candidates re-ordered by late interaction) over the caller's memories."""
        return await call(ops.recall(who, body))

    @router.get("/whoami", response_model=WhoAmI, summary="Who am I")
    async def whoami(who: Caller) -> WhoAmI:
        return await call(ops.who_am_i(who))

    @router.post("/keys", status_code=201, response_model=CreatedApiKey, tags=["admin"], summary="Create an API key")
    async def create_key(body: CreateApiKey, who: Caller, idempotency_key: IdempotencyKey = None) -> Any:
        """Create an API key (the secret is in this response only). Needs the `admin` scope: the install
        operator's role, never restricted to a project."""
        return await call(ops.create_api_key(who, body, key=idempotency_key))

    @router.get("/keys", response_model=ApiKeyList, tags=["admin"], summary="List API keys")
    async def list_keys(who: Caller, user_id: Annotated[str | None, Query(max_length=128)] = None) -> Any:
        """Every key (or one user's), never their secrets. Needs the `admin` scope."""
        return await call(ops.list_api_keys(who, ListApiKeys(user_id=user_id)))

    @router.delete("/keys/{key_id}", response_model=ApiKeyView, tags=["admin"], summary="Revoke an API key")
    async def revoke_key(key_id: UUID, who: Caller, idempotency_key: IdempotencyKey = None) -> Any:
        """Revoke a key; every gateway refuses it at once. Needs the `admin` scope."""
        return await call(ops.revoke_api_key(who, RevokeApiKey(key_id=key_id), key=idempotency_key))

    return router

