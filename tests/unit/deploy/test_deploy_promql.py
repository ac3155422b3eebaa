"""Alert rules and every dashboard query parse as PromQL (`promtool check rules`; needs promtool)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from deploy_tree import DEPLOY, K8S, load_documents

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")
# Grafana fills these in before a query reaches Prometheus.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "1h", "$task": ".*", "$hardware": ".*"}


def _check_rules(path: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )


def test_alert_rules_pass_promtool(tmp_path: Path) -> None:
    (rule,) = load_documents(K8S / "components" / "prometheus-operator" / "alerts.yaml")
    path = tmp_path / "alerts.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    result = _check_rules(path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_queries_parse_as_promql(tmp_path: Path) -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "kernelfoundry.json").read_text())
    rules = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            rules.append({"record": f"kf:dashboard:panel{panel['id']}{target['refId']}", "expr": expr})
    path = tmp_path / "dashboard.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = _check_rules(path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(rules)} rules found" in result.stdout


def test_promtool_rejects_a_broken_query(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(
        yaml.safe_dump({"groups": [{"name": "x", "rules": [{"record": "a:b", "expr": "sum by (x"}]}]})
    )
    assert _check_rules(path).returncode != 0
