"""The dashboard says what the bounded task label means wherever it shows a task-labelled metric."""

from __future__ import annotations

import json
from typing import Any

from deploy_tree import DEPLOY
from promql_names import metric_names

from kernelfoundry.telemetry.metrics import ALL_METRICS, MAX_TASK_LABELS, OTHER_TASKS

DASHBOARD = DEPLOY / "grafana" / "kernelfoundry.json"
TASK_LABELLED = {name for spec in ALL_METRICS if "task" in spec.labels for name in spec.sample_names()}


def _explains_the_bound(description: str) -> bool:
    return OTHER_TASKS in description and f"first {MAX_TASK_LABELS}" in description


def test_every_panel_of_a_task_labelled_metric_explains_the_other_bucket() -> None:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    panels = [
        p
        for p in dashboard["panels"]
        if p["type"] != "row" and any(metric_names(t["expr"]) & TASK_LABELLED for t in p["targets"])
    ]
    assert panels, "no panel shows a task-labelled metric"
    for panel in panels:
        assert _explains_the_bound(panel.get("description", "")), panel["title"]
    (task,) = [v for v in dashboard["templating"]["list"] if v["name"] == "task"]
    assert _explains_the_bound(task.get("description", ""))


def test_the_metrics_help_says_it_too() -> None:
    for spec in ALL_METRICS:
        if "task" in spec.labels:
            assert _explains_the_bound(spec.help), spec.name
