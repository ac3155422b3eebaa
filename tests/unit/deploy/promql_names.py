"""Reads metric and label names out of PromQL text, enough to check queries against telemetry/metrics.py.

Not a PromQL parser: it finds `kf_*` series names (and the NATS exporter's `jetstream_*`),
`by (...)`/`without (...)`/`on (...)` label lists and `{label op "value"}` matchers, which is what the
project's dashboard, alerts and adapter rules use.
"""

from __future__ import annotations

import re

METRIC = re.compile(r"\b(?:kf|jetstream)_[a-z0-9_]+\b")  # ours and the NATS exporter's
GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"")
# Labels Prometheus itself attaches to every series (target labels) or to histogram buckets.
SCRAPE_LABELS = frozenset({"le", "job", "instance", "namespace", "pod", "component", "__name__"})


def metric_names(expr: str) -> set[str]:
    return set(METRIC.findall(expr))


def label_names(expr: str) -> set[str]:
    labels = set(MATCHER.findall(expr))
    for group in GROUPING.findall(expr):
        labels |= {name.strip() for name in group.split(",") if name.strip()}
    return labels
