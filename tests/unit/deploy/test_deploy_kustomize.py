"""`kubectl kustomize` renders the base, both overlays and every component (skipped without kubectl)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_tree import K8S

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
COMPONENTS = sorted(p.name for p in (K8S / "components").iterdir() if (p / "kustomization.yaml").exists())
CLUSTER_SCOPED = {"Namespace", "RuntimeClass"}
QUEUE_SCALED = {"kf-compiler-cpu", "kf-compiler-cuda", "kf-executor-cpu", "kf-executor-gpu"}


def _render(directory: Path) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    result = subprocess.run(
        [KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _images(objects: list[dict[str, Any]]) -> set[str]:
    images = set()
    for obj in objects:
        spec = obj.get("spec", {})
        if obj["kind"] == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        for container in spec.get("template", {}).get("spec", {}).get("containers", []):
            images.add(container["image"])
    return images


@pytest.mark.parametrize("target", ["base", "overlays/dev", "overlays/production"])
def test_kustomize_renders_everything_into_the_kernelfoundry_namespace(target: str) -> None:
    objects = _render(K8S / target)
    for obj in objects:
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"].get("namespace") == "kernelfoundry", obj["metadata"]["name"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kernelfoundry"
    assert "kf-grafana-dashboard" in _by_kind(objects, "ConfigMap")


@pytest.mark.parametrize("overlay", ["dev", "production"])
def test_overlays_point_every_image_at_a_tagged_registry_path(overlay: str) -> None:
    for image in _images(_render(K8S / "overlays" / overlay)):
        name, _, tag = image.rpartition(":")
        assert name and tag and "/" not in tag, image
        if "kernelfoundry" in name:
            assert name.startswith("ghcr.io/"), image


def test_dev_overlay_generates_the_mongodb_secret_and_skips_gpu_work() -> None:
    objects = _render(K8S / "overlays" / "dev")
    secret = _by_kind(objects, "Secret")["kf-mongodb-auth"]
    assert set(secret["data"]) == {"username", "password"}
    deployments = _by_kind(objects, "Deployment")
    assert deployments["kf-executor-gpu"]["spec"]["replicas"] == 0
    assert deployments["kf-compiler-cuda"]["spec"]["replicas"] == 0


def test_production_runs_a_three_node_nats_cluster_with_a_quorum_budget() -> None:
    objects = _render(K8S / "overlays" / "production")
    nats = _by_kind(objects, "StatefulSet")["kf-nats"]
    assert nats["spec"]["replicas"] == 3
    config = _by_kind(objects, "ConfigMap")["kf-nats-config"]["data"]["nats.conf"]
    for ordinal in range(3):
        assert f"nats://kf-nats-{ordinal}.kf-nats-headless:6222" in config
    assert _by_kind(objects, "PodDisruptionBudget")["kf-nats"]["spec"]["maxUnavailable"] == 1
    assert "Secret" not in {o["kind"] for o in objects}, "production secrets are created out of band"


def test_production_autoscales_workers_on_queue_lag_and_leaves_their_replicas_to_keda() -> None:
    objects = _render(K8S / "overlays" / "production")
    assert set(_by_kind(objects, "ScaledObject")) == QUEUE_SCALED
    deployments = _by_kind(objects, "Deployment")
    for name in QUEUE_SCALED:
        assert "replicas" not in deployments[name]["spec"], name
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule", "NetworkPolicy", "CronJob"):
        assert _by_kind(objects, kind), kind


@pytest.mark.parametrize("component", COMPONENTS)
def test_each_component_renders_on_top_of_the_base(component: str, tmp_path: Path) -> None:
    # kustomize refuses absolute paths; a relative one from the scratch folder works anywhere.
    base = os.path.relpath(K8S / "base", tmp_path)
    part = os.path.relpath(K8S / "components" / component, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [base], "components": [part]}), encoding="utf-8"
    )
    objects = _render(tmp_path)
    assert len(objects) > len(_render(K8S / "base")) or component == "sandboxed-builds"
    if component == "sandboxed-builds":
        deployments = _by_kind(objects, "Deployment")
        assert deployments["kf-compiler-cpu"]["spec"]["template"]["spec"]["runtimeClassName"] == "gvisor"
        assert "runtimeClassName" not in deployments["kf-executor-gpu"]["spec"]["template"]["spec"]
