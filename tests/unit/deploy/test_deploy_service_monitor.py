"""The ServiceMonitor keeps the services' own `service` label: what Prometheus does to a scraped series,
played through the monitor's relabelings as Prometheus applies them.

With the Operator, every target gets the label `service` (the Kubernetes Service, kf-metrics). A series
that has its own `service` label (kf_messages_processed_total{service="evolver"}) then clashes: without
honorLabels, Prometheus renames the series' label to exported_service and keeps the target's. The
monitor's metricRelabelings must undo that, and its relabelings must name the component `component`.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from deploy_tree import K8S, load_documents

MONITORS = K8S / "components" / "prometheus-operator" / "monitors.yaml"
TARGET = {
    "service": "kf-metrics",
    "namespace": "kernelfoundry",
    "pod": "kf-evolver-0",
    "job": "kf-metrics",
    "endpoint": "metrics",
}


def endpoint() -> dict[str, Any]:
    (monitor,) = [d for d in load_documents(MONITORS) if d["kind"] == "ServiceMonitor"]
    (found,) = monitor["spec"]["endpoints"]
    return found


def relabel(labels: dict[str, str], rules: list[dict[str, Any]]) -> dict[str, str]:
    """Prometheus's relabelling for the actions the monitor uses (replace, labeldrop)."""
    labels = dict(labels)
    for rule in rules:
        action = rule.get("action", "replace")
        regex = re.compile(f"^(?:{rule.get('regex', '(.*)')})$")
        if action == "labeldrop":
            labels = {k: v for k, v in labels.items() if not regex.match(k)}
            continue
        assert action == "replace", f"the test does not know the action {action!r}"
        value = rule.get("separator", ";").join(labels.get(s, "") for s in rule.get("sourceLabels", []))
        match = regex.match(value)
        if match is None:
            continue
        result = match.expand(re.sub(r"\$\{?(\d+)\}?", r"\\g<\1>", rule.get("replacement", "$1")))
        if result:
            labels[rule["targetLabel"]] = result
        else:
            labels.pop(rule["targetLabel"], None)
    return labels


def scrape(series: dict[str, str], target: dict[str, str], honor_labels: bool) -> dict[str, str]:
    """Attach the target's labels to a scraped series as Prometheus does, then the metricRelabelings."""
    merged = dict(series)
    for name, value in target.items():
        if name in merged and not honor_labels:
            merged[f"exported_{name}"] = merged[name]
        if name not in merged or not honor_labels:
            merged[name] = value
    return relabel(merged, endpoint().get("metricRelabelings", []))


@pytest.mark.parametrize("honor_labels", [False, True])
def test_a_series_keeps_its_own_service_label(honor_labels: bool) -> None:
    series = {"__name__": "kf_messages_processed_total", "service": "evolver", "outcome": "ok"}
    labels = scrape(series, TARGET, honor_labels)
    assert labels["service"] == "evolver"
    assert "exported_service" not in labels
    assert labels["namespace"] == "kernelfoundry" and labels["outcome"] == "ok"


def test_a_series_without_a_service_label_keeps_the_target_s() -> None:
    labels = scrape({"__name__": "kf_runs_active"}, TARGET, honor_labels=False)
    assert labels["service"] == "kf-metrics"


def test_the_relabelling_is_what_fixes_it() -> None:
    """Without the metricRelabelings the clash does hide the series' service (the test can fail)."""
    series = {"__name__": "kf_messages_processed_total", "service": "store"}
    merged = {**series, **TARGET, "exported_service": "store"}
    assert relabel(merged, [])["service"] == "kf-metrics"
    assert scrape(series, TARGET, honor_labels=False)["service"] == "store"


def test_targets_carry_the_deployment_s_component_as_component() -> None:
    meta = {"__meta_kubernetes_pod_label_app_kubernetes_io_component": "executor-gpu", **TARGET}
    labels = relabel(meta, endpoint()["relabelings"])
    assert labels["component"] == "executor-gpu"
