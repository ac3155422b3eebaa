"""The manifests' JetStream byte limits fit the NATS servers' storage.

JetStream reserves a stream's byte limit on a server when the stream is created, and refuses the stream
("insufficient storage resources") when the reservations exceed the server's max_file_store. Every server
holds a replica of every stream (one server, or three with three replicas), so per server the limits add up
to 2 x KF_EVENTS_MAX_BYTES (history and dead letters) + KF_ARTIFACTS_MAX_BYTES.
"""

from __future__ import annotations

import re

import pytest
import yaml
from deploy_tree import BASE, K8S, load_documents

from kernelfoundry.config import Settings

UNITS = {"KB": 1000, "MB": 1000**2, "GB": 1000**3, "TB": 1000**4}


def _max_file_store(nats_conf: str) -> int:
    match = re.search(r"max_file_store:\s*(\d+)([KMGT]B)", nats_conf)
    assert match, "max_file_store is not set"
    return int(match.group(1)) * UNITS[match.group(2)]


def _base_config() -> dict[str, str]:
    (config, *_) = [d for d in load_documents(BASE / "config.yaml") if d["kind"] == "ConfigMap"]
    return dict(config["data"])


def _base_nats_conf() -> str:
    (config,) = [d for d in load_documents(BASE / "nats.yaml") if d["kind"] == "ConfigMap"]
    return config["data"]["nats.conf"]


def _patched(overlay: str) -> tuple[dict[str, str], str]:
    """kf-config and nats.conf as the overlay leaves them (its JSON patches of kf-config applied)."""
    data, nats_conf = _base_config(), _base_nats_conf()
    (kustomization,) = load_documents(K8S / "overlays" / overlay / "kustomization.yaml")
    for patch in kustomization.get("patches", []):
        if patch.get("target", {}).get("name") == "kf-config":
            for op in yaml.safe_load(patch["patch"]):
                key = op["path"].removeprefix("/data/")
                assert op["op"] in ("add", "replace") and (op["op"] == "add") != (key in data), op
                data[key] = op["value"]
        elif "path" in patch:
            for doc in load_documents(K8S / "overlays" / overlay / patch["path"]):
                if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "kf-nats-config":
                    nats_conf = doc["data"]["nats.conf"]
    return data, nats_conf


def _settings(data: dict[str, str]) -> Settings:
    keys = {k.removeprefix("KF_").lower(): v for k, v in data.items() if k.startswith("KF_")}
    return Settings(**keys)  # type: ignore[arg-type]


@pytest.mark.parametrize("overlay", ["dev", "production"])
def test_the_byte_limits_fit_every_nats_server(overlay: str) -> None:
    data, nats_conf = _patched(overlay)
    settings = _settings(data)
    reserved = 2 * settings.events_max_bytes + settings.artifacts_max_bytes
    assert settings.events_max_bytes > 0 and settings.artifacts_max_bytes > 0, "no byte limit"
    assert reserved < _max_file_store(nats_conf), (overlay, reserved)


def test_production_keeps_three_replicas_and_dev_one() -> None:
    assert _settings(_patched("production")[0]).stream_replicas == 3
    assert _settings(_patched("dev")[0]).stream_replicas == 1


def test_the_base_limits_fit_the_base_server() -> None:
    settings = _settings(_base_config())
    assert 2 * settings.events_max_bytes + settings.artifacts_max_bytes < _max_file_store(_base_nats_conf())
    assert settings.events_max_age_h > 0 and settings.artifacts_max_age_h > 0
