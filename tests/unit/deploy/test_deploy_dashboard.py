"""The Grafana dashboard, alerts and adapter rules query only metrics and labels that telemetry defines."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from deploy_tree import DEPLOY, K8S, load_documents
from exporter_metrics import NATS_EXPORTER
from promql_names import SCRAPE_LABELS, label_names, metric_names

from kernelfoundry.telemetry.metrics import ALL_METRICS

DASHBOARD = DEPLOY / "grafana" / "kernelfoundry.json"
SAMPLE_LABELS = {name: set(spec.labels) for spec in ALL_METRICS for name in spec.sample_names()}
SAMPLE_LABELS |= NATS_EXPORTER  # JetStream storage: alerts and one panel


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _panels() -> list[dict[str, Any]]:
    return [p for p in _dashboard()["panels"] if p["type"] != "row"]


def _dashboard_queries() -> list[str]:
    queries = [t["expr"] for p in _panels() for t in p["targets"]]
    queries += [v["definition"] for v in _dashboard()["templating"]["list"] if v["type"] == "query"]
    return queries


def _alert_queries() -> list[str]:
    (rule,) = load_documents(K8S / "components" / "prometheus-operator" / "alerts.yaml")
    return [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]


def _adapter_queries() -> list[str]:
    (values,) = load_documents(DEPLOY / "prometheus" / "adapter-rules.yaml")
    return [f"{r['seriesQuery']} {r['metricsQuery']}" for r in values["rules"]["external"]]


def _check(expr: str) -> None:
    metrics = metric_names(expr)
    unknown = metrics - SAMPLE_LABELS.keys()
    assert not unknown, f"{expr!r} queries {sorted(unknown)}, which telemetry/metrics.py does not define"
    allowed = set(SCRAPE_LABELS).union(*(SAMPLE_LABELS[m] for m in metrics))
    stray = label_names(expr) - allowed
    assert not stray, f"{expr!r} uses labels {sorted(stray)} that none of {sorted(metrics)} carries"


@pytest.mark.parametrize("expr", _dashboard_queries())
def test_dashboard_queries_only_defined_metrics_and_labels(expr: str) -> None:
    assert metric_names(expr), f"{expr!r} queries no KernelFoundry metric"
    _check(expr)


@pytest.mark.parametrize("expr", _alert_queries() + _adapter_queries())
def test_alerts_and_adapter_rules_query_only_defined_metrics_and_labels(expr: str) -> None:
    _check(expr)


def test_the_label_checker_rejects_unknown_metrics_and_labels() -> None:
    with pytest.raises(AssertionError, match="does not define"):
        _check("rate(kf_no_such_metric_total[5m])")
    with pytest.raises(AssertionError, match="candidate_id"):
        _check("sum by (candidate_id) (rate(kf_evaluations_total[5m]))")


def test_dashboard_shows_every_metric() -> None:
    queried = set().union(*(metric_names(q) for q in _dashboard_queries()))
    for spec in ALL_METRICS:
        assert spec.sample_names() & queried, f"no dashboard panel shows {spec.name}"


def test_dashboard_has_the_required_views() -> None:
    titles = {p["title"] for p in _panels()}
    required = {
        "Messages / s per service",
        "Evaluations / s by outcome",
        "Compile time p50 / p95",
        "Evaluation time p50 / p95",
        "Queue lag per consumer",
        "Evaluation failures / s by reason",
        "Best speedup per task",
        "Archive cells filled per task",
        "Active runs",
        "Tokens / s",
        "Spend per hour",
    }
    assert required <= titles


def test_dashboard_layout_is_well_formed() -> None:
    dashboard = _dashboard()
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert dashboard["uid"] == "kernelfoundry"
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
    for panel in _panels():
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]


def test_dashboard_variables_used_in_queries_are_defined() -> None:
    defined = {v["name"] for v in _dashboard()["templating"]["list"]}
    text = DASHBOARD.read_text()
    used = set(re.findall(r"\$\{?([a-z_]+)", text)) - {"__rate_interval", "__range", "__all"}
    assert used <= defined


def test_dashboard_config_map_carries_the_grafana_sidecar_label() -> None:
    (kustomization,) = load_documents(DEPLOY / "grafana" / "kustomization.yaml")
    assert kustomization["generatorOptions"]["labels"] == {"grafana_dashboard": "1"}
    (generator,) = kustomization["configMapGenerator"]
    assert generator["files"] == [DASHBOARD.name]
    (base,) = load_documents(K8S / "base" / "kustomization.yaml")
    assert Path("../../grafana") in {Path(r) for r in base["resources"]}
