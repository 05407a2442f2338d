"""Pins the JSON schema of every contract model, so an incompatible change cannot slip in unnoticed.

A deliberate change: bump the model's schema version where the wire format changes, then refresh
the snapshots with `python tests/unit/test_contract_schemas.py --update` and commit them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from contracts import auth, daily_logs, envelope, errors, extraction_modes, graph, memory, portability

pytestmark = pytest.mark.unit
SNAPSHOTS = Path(__file__).parent / "contract_schemas"


def contract_models() -> dict[str, type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {}
    for module in (envelope, errors, memory, auth, daily_logs, extraction_modes, graph, portability):
        for name, value in vars(module).items():
            if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == module.__name__:
                found[f"{module.__name__.split('.')[-1]}.{name}"] = value
    return found


def schema_of(model: type[BaseModel]) -> dict:  # type: ignore[type-arg]
    if model.__pydantic_generic_metadata__.get("parameters"):
        from typing import Any

        model = model[Any]  # type: ignore[index]
    return model.model_json_schema()


@pytest.mark.parametrize("name", sorted(contract_models()))
def test_schema_is_pinned(name: str) -> None:
    path = SNAPSHOTS / f"{name}.json"
    assert path.exists(), f"no snapshot for new contract {name}: run `python {__file__} --update`"
    assert schema_of(contract_models()[name]) == json.loads(path.read_text()), (
        f"the wire schema of {name} changed. If intended, bump its version and run `python {__file__} --update`."
    )


def test_no_stale_snapshots() -> None:
    assert {p.stem for p in SNAPSHOTS.glob("*.json")} == set(contract_models())


if __name__ == "__main__" and "--update" in sys.argv:
    SNAPSHOTS.mkdir(exist_ok=True)
    for old in SNAPSHOTS.glob("*.json"):
        old.unlink()
    for name, model in contract_models().items():
        (SNAPSHOTS / f"{name}.json").write_text(json.dumps(schema_of(model), indent=2, sort_keys=True) + "\n")
    print(f"wrote {len(contract_models())} schemas to {SNAPSHOTS}")
