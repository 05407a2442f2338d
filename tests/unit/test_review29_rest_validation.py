"""Issue 28/29: a contract's rule broken inside a REST route (a ValidationError the request model
did not catch first) is a 422 naming the field, never a 500; and the REST models take the
contract's own field types, so they refuse what the contract refuses before the route runs."""

from __future__ import annotations

import pytest
from fastapi import APIRouter, FastAPI, Request
from fastapi.testclient import TestClient

from contracts.memory import ForgetMemory, SaveMemory
from services.gateway.catalogue import operation
from services.gateway.entrypoints.rest import ApiError, RestRoute, error_response, request_body

pytestmark = pytest.mark.unit


def test_a_validation_error_raised_in_a_route_is_a_422_naming_the_field() -> None:
    router = APIRouter(route_class=RestRoute)

    @router.post("/check")
    async def check() -> dict[str, str]:
        SaveMemory.model_validate({"content": "ok", "context": "bad\u0000context"})
        return {}

    app = FastAPI()
    app.include_router(router)

    @app.exception_handler(ApiError)
    async def on_api_error(_: Request, exc: ApiError):  # type: ignore[no-untyped-def]
        return error_response(exc)

    r = TestClient(app, raise_server_exceptions=False).post("/check")
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_argument" and r.json()["error"]["field"] == "context"


def test_the_rest_models_reuse_the_contract_fields() -> None:
    ForgetRequest, SaveRequest = request_body(operation(ForgetMemory)), request_body(operation(SaveMemory))
    assert ForgetRequest is not None and SaveRequest is not None
    for name in ("content", "reason"):
        assert ForgetRequest.model_fields[name].metadata == ForgetMemory.model_fields[name].metadata
    assert SaveRequest.model_fields["source"].metadata == SaveMemory.model_fields["source"].metadata
    assert SaveRequest.model_fields["source"].default == "api"
