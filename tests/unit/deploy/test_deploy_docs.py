"""docs/operations.md documents every metric with its labels, every alert and every component."""

from __future__ import annotations

import re

from deploy_tree import DEPLOY, K8S, load_documents

from kernelfoundry.telemetry.metrics import ALL_METRICS

OPERATIONS = (DEPLOY.parent / "docs" / "operations.md").read_text()


def _metric_rows() -> dict[str, tuple[str, set[str]]]:
    rows = {}
    for match in re.finditer(r"^\| `(kf_[a-z0-9_]+)` \| (\w+) \| ([^|]*) \|", OPERATIONS, re.MULTILINE):
        labels = set(re.findall(r"`([a-z_]+)`", match.group(3)))
        rows[match.group(1)] = (match.group(2), labels)
    return rows


def test_metrics_reference_lists_every_metric_with_its_type_and_labels() -> None:
    rows = _metric_rows()
    assert set(rows) == {spec.name for spec in ALL_METRICS}
    for spec in ALL_METRICS:
        assert rows[spec.name] == (spec.kind, set(spec.labels)), spec.name


def test_every_alert_is_explained() -> None:
    (rule,) = load_documents(K8S / "components" / "prometheus-operator" / "alerts.yaml")
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            assert f"| `{alert['alert']}` |" in OPERATIONS, alert["alert"]


def test_every_component_and_overlay_is_described() -> None:
    for folder in [*(K8S / "components").iterdir(), *(K8S / "overlays").iterdir()]:
        assert f"{folder.name}/" in OPERATIONS, folder.name


def test_the_endpoint_paths_are_documented() -> None:
    for path in ("/metrics", "/healthz", "/readyz"):
        assert f"| `{path}` |" in OPERATIONS
