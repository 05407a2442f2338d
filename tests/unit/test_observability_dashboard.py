"""The Grafana dashboard (deploy/grafana/engram.json) draws only metrics the services export."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

import kit.metrics  # noqa: F401 - declares every engram_* metric

pytestmark = pytest.mark.unit

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "engram.json"


def exported_sample_names() -> set[str]:
    names = set()
    for family in REGISTRY.collect():
        names.add(family.name)
        if family.type == "histogram":
            names.update(family.name + suffix for suffix in ("_bucket", "_count", "_sum"))
        if family.type == "counter":
            names.add(family.name + "_total")
    return names


def test_every_engram_metric_of_the_dashboard_is_exported() -> None:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    used = {name for e in exprs for name in re.findall(r"\bengram_[a-z_]+", e)}
    assert used, "the dashboard queries no engram metric"
    missing = used - exported_sample_names()
    assert not missing, f"the dashboard queries metrics nobody exports: {sorted(missing)}"


def test_the_dashboard_has_a_prometheus_datasource_variable_and_unique_panel_ids() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert any(v["type"] == "datasource" and v["query"] == "prometheus" for v in doc["templating"]["list"])
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
