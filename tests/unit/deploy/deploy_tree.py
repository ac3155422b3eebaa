"""The repository's deploy/ tree, parsed as YAML for the deployment tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
K8S = DEPLOY / "k8s"
BASE = K8S / "base"


def load_documents(path: Path) -> list[dict[str, Any]]:
    """Every non-empty YAML document of a file."""
    with path.open() as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


def base_objects() -> list[dict[str, Any]]:
    """The objects the base kustomization lists, read straight from its resource files."""
    kustomization = load_documents(BASE / "kustomization.yaml")[0]
    objects: list[dict[str, Any]] = []
    for resource in kustomization["resources"]:
        path = BASE / resource
        if path.is_file():
            objects += load_documents(path)
    return objects
