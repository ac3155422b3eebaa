"""Fixtures of the deployment tests: the base manifests, parsed once per session."""

from __future__ import annotations

from typing import Any

import pytest
from deploy_tree import base_objects


@pytest.fixture(scope="session")
def base() -> list[dict[str, Any]]:
    return base_objects()


@pytest.fixture(scope="session")
def deployments(base: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in base if obj["kind"] == "Deployment"}
