"""REST under /v1: the same operations as the MCP tools, with OpenAPI docs."""


from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from pydantic import BaseModel, ConfigDict, Field, model_validator

from contracts.auth import ApiKeyList, ApiKeyView, CreateApiKey, CreatedApiKey, Scope
from contracts.errors import HTTP_STATUS, ErrorBody, ErrorCode
from contracts.memory import (
    MAX_CONTENT_CHARS,
    MAX_TITLE_CHARS,
    MEMORY_KEY_PATTERN,
    PROJECT_PATTERN,
    Category,
    ForgetMemoryResult,
    MemoryHistory,
    MemoryList,
    MemoryLookup,
    Profile,
    ProjectList,
    Recall,
    RecallResult,
    SaveMemory,
    SaveMemoryResult,
    SaveSharedMemory,
    SaveSharedMemoryResult,
    SharedMemoryList,
    UpdateMemory,
)
from contracts.subjects import AUTH
from services.gateway.adapters.backend import Backend, BackendError
from services.gateway.pin import pinned_project
from services.gateway.principal import AccessDenied, Principal


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
            raise unauthorized(request)
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
            # RFC 6750 §3.1: insufficient_scope, naming the scope needed.
            challenge = f'Bearer error="insufficient_scope", scope="{scope.value}", error_description="{exc}"'
            raise ApiError(403, ErrorBody(code=ErrorCode.PERMISSION_DENIED, message=str(exc)),
                           {"WWW-Authenticate": challenge}) from exc

    def project_of(who: Principal, requested: str | None, search: bool = False) -> str | None:
        try:
            pin = pinned_project.get()
            return who.search_project(requested, pin) if search else who.project_for(requested, pin)
        except AccessDenied as exc:
            raise ApiError(403, ErrorBody(code=ErrorCode.PERMISSION_DENIED, message=str(exc), field="project")) from exc

    @router.post("/memories", status_code=201, response_model=SaveMemoryResult, summary="Save a memory")
    async def save(body: SaveRequest, who: Caller, idempotency_key: IdempotencyKey = None) -> Any:
        """Save a memory. The same content saved again in the same project is not duplicated."""
        guard(who, Scope.MEMORY_WRITE)
        payload = body.model_dump(mode="json", exclude_none=True)
        payload["project"] = project_of(who, body.project)
        return await call(backend.save_memory(who.tenant, payload, idempotency_key))

    @router.post("/memories/update", response_model=SaveMemoryResult, summary="Update a memory (new version)")
    async def update(body: UpdateRequest, who: Caller, idempotency_key: IdempotencyKey = None) -> Any:
        """Write a new version of a memory found by id or memory_key."""
        guard(who, Scope.MEMORY_WRITE)
        payload = body.model_dump(mode="json", exclude_none=True)
        payload["project"] = project_of(who, body.project)
        return await call(backend.command_memory(who.tenant, "update_memory", payload, idempotency_key))

    @router.get("/memories/by-key", response_model=MemoryLookup, summary="Get a memory by memory_key")
    async def by_key(
        who: Caller,
        memory_key: Annotated[str, Query(pattern=MEMORY_KEY_PATTERN, max_length=80)],
        project: Annotated[str | None, Query(pattern=PROJECT_PATTERN)] = None,
    ) -> Any:
        guard(who, Scope.MEMORY_READ)
        payload = {"project": project_of(who, project), "memory_key": memory_key}
        return await call(backend.query_memory(who.tenant, "get_memory_by_key", payload))

    @router.get("/memories", response_model=MemoryList, summary="List memories by category and/or keyword")
    async def list_memories(
        who: Caller,
        category: Category | None = None,
        keyword: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
        project: Annotated[str | None, Query(pattern=PROJECT_PATTERN)] = None,
    ) -> Any:
        guard(who, Scope.MEMORY_READ)
        payload = {"project": project_of(who, project, search=True), "category": category.value if category else None,
                   "keyword": keyword, "limit": limit}
        return await call(backend.query_memory(who.tenant, "recall_memory", payload))

    @router.get("/memories/{memory_id}/history", response_model=MemoryHistory, summary="A memory's versions")
    async def history(memory_id: UUID, who: Caller) -> Any:
        """Every version from the event log, oldest first, each with when it stopped being true."""
        guard(who, Scope.MEMORY_READ)
        return await call(backend.query_memory(who.tenant, "memory_history", {"memory_id": str(memory_id)}))

    @router.post("/shared-memories", response_model=SaveSharedMemoryResult, summary="Save a shared memory")
    async def save_shared(body: SaveSharedMemory, who: Caller, idempotency_key: IdempotencyKey = None) -> Any:
        """Idempotent per title: the same title again updates it."""
        guard(who, Scope.MEMORY_WRITE)
        return await call(backend.command_memory(who.tenant, "save_shared_memory", body.model_dump(), idempotency_key))

    @router.get("/shared-memories", response_model=SharedMemoryList, summary="Find shared memories")
    async def get_shared(
        who: Caller,
        title: Annotated[str | None, Query(min_length=1, max_length=MAX_TITLE_CHARS)] = None,
        keyword: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
    ) -> Any:
        guard(who, Scope.MEMORY_READ)
        payload = {"title": title, "keyword": keyword, "limit": limit}
        return await call(backend.query_memory(who.tenant, "get_shared_memories", payload))

    @router.get("/projects", response_model=ProjectList, summary="List projects")
    async def projects(who: Caller) -> Any:
        guard(who, Scope.MEMORY_READ)
        result = await call(backend.query_memory(who.tenant, "list_projects", {}))
        if who.project:
            result["projects"] = [p for p in result["projects"] if p["project"] == who.project]
        return result

    @router.get("/profile", response_model=Profile, summary="The user's profile")
    async def profile(who: Caller, project: Annotated[str | None, Query(pattern=PROJECT_PATTERN)] = None) -> Any:
        guard(who, Scope.MEMORY_READ)
        payload = {"project": project_of(who, project, search=True)}
        return await call(backend.query_memory(who.tenant, "profile", payload))

    @router.post("/memories/forget", response_model=ForgetMemoryResult, summary="Forget a memory")
    async def forget(body: ForgetRequest, who: Caller, idempotency_key: IdempotencyKey = None) -> Any:
        """Forget by id, or by content (exact match, then semantic similarity ≥ 0.85)."""
        guard(who, Scope.MEMORY_WRITE)
        payload = body.model_dump(mode="json", exclude_none=True)
        payload["project"] = project_of(who, body.project)
        return await call(backend.forget_memory(who.tenant, payload, idempotency_key))

    @router.post("/recall", response_model=RecallResult, summary="Recall memories")
    async def recall(body: Recall, who: Caller) -> Any:
        """Hybrid search (dense + keyword, RRF; its best candidates re-ordered by late interaction) over the caller's memories."""
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

    @router.post("/keys", status_code=201, response_model=CreatedApiKey, tags=["admin"], summary="Create an API key")
    async def create_key(body: CreateApiKey, who: Caller, idempotency_key: IdempotencyKey = None) -> Any:
        """Create an API key (the secret is in this response only). Needs the `admin` scope."""
        guard(who, Scope.ADMIN)
        payload = body.model_dump(mode="json", exclude_none=True)
        return await call(backend.command(AUTH, "create_api_key", who.tenant, payload, idempotency_key))

    @router.get("/keys", response_model=ApiKeyList, tags=["admin"], summary="List API keys")
    async def list_keys(who: Caller, user_id: Annotated[str | None, Query(max_length=128)] = None) -> Any:
        """Every key (or one user's), never their secrets. Needs the `admin` scope."""
        guard(who, Scope.ADMIN)
        return await call(backend.query(AUTH, "list_api_keys", who.tenant, {"user_id": user_id}))

    @router.delete("/keys/{key_id}", response_model=ApiKeyView, tags=["admin"], summary="Revoke an API key")
    async def revoke_key(key_id: UUID, who: Caller, idempotency_key: IdempotencyKey = None) -> Any:
        """Revoke a key; every gateway refuses it at once. Needs the `admin` scope."""
        guard(who, Scope.ADMIN)
        return await call(backend.command(AUTH, "revoke_api_key", who.tenant, {"key_id": str(key_id)}, idempotency_key))

    return router
