"""Credentials in the manifests: the NATS users, the API token and TLS.

The NATS servers' auth.conf is what kernelfoundry.bus.permissions renders for the manifests' own pools,
the real nats-server accepts the configuration, every service connects as its own user with its password
from the Secret kf-nats-users, every Secret a manifest reads has a template with that key, the evolver and
the store check the API token (and in production listen with TLS), and production keeps 3 replicas.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from deploy_tree import BASE, K8S, load_documents

from kernelfoundry.bus.permissions import deployment_users, executor_user_name, render_authorization
from kernelfoundry.stack.nats_server import NatsServerError, server_binary

TEMPLATES = ("mongodb-secret.template.yaml", "nats-users-secret.template.yaml", "api-secrets.template.yaml")
PRODUCTION = K8S / "overlays" / "production"


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]["containers"][0]


def _env(deployment: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in _container(deployment).get("env", [])}


def _nats_config(base: list[dict[str, Any]]) -> dict[str, str]:
    (config,) = [o for o in base if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "kf-nats-config"]
    return config["data"]


def _pools(deployments: dict[str, dict[str, Any]], component: str) -> list[str]:
    found: list[str] = []
    for name, deployment in deployments.items():
        if name.startswith(f"kf-{component}"):
            found += [h.strip() for h in _env(deployment)["KF_HARDWARE"].split(",")]
    return sorted(dict.fromkeys(found))


def _users(base: list[dict[str, Any]], deployments: dict[str, dict[str, Any]]):  # type: ignore[no-untyped-def]
    (config,) = [o for o in base if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "kf-config"]
    return deployment_users(
        [config["data"]["KF_GENERATOR"]], _pools(deployments, "compiler"), _pools(deployments, "executor")
    )


def _template_keys() -> dict[str, set[str]]:
    keys: dict[str, set[str]] = {}
    for name in TEMPLATES:
        for secret in load_documents(BASE / name):
            keys[secret["metadata"]["name"]] = set(secret["stringData"])
    return keys


def test_auth_conf_is_what_the_permissions_render_for_these_pools(
    base: list[dict[str, Any]], deployments: dict[str, dict[str, Any]]
) -> None:
    data = _nats_config(base)
    assert data["auth.conf"] == render_authorization(_users(base, deployments))
    assert "include ./auth.conf" in data["nats.conf"]
    (cluster, *_) = load_documents(PRODUCTION / "nats-cluster.yaml")
    assert "include ./auth.conf" in cluster["data"]["nats.conf"]  # the overlay replaces nats.conf only


def test_each_service_connects_as_its_own_user(
    base: list[dict[str, Any]], deployments: dict[str, dict[str, Any]]
) -> None:
    users = {u.name: u for u in _users(base, deployments)}
    seen = set()
    for name, deployment in deployments.items():
        env = _env(deployment)
        user = users[env["KF_NATS_USER"]]
        assert env["KF_NATS_PASSWORD"]["secretKeyRef"] == {
            "name": "kf-nats-users",
            "key": user.password_variable,
        }
        if name.startswith("kf-executor"):
            assert user.name == executor_user_name(env["KF_HARDWARE"])
        seen.add(user.name)
    assert seen == set(users), "a user no Deployment connects as"
    (nats,) = [o for o in base if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "kf-nats"]
    assert {"secretRef": {"name": "kf-nats-users"}} in _container(nats)["envFrom"]


def test_every_secret_a_manifest_reads_has_a_template_with_that_key(
    deployments: dict[str, dict[str, Any]],
) -> None:
    keys = _template_keys()
    for deployment in deployments.values():
        for entry in _container(deployment).get("env", []):
            ref = entry.get("valueFrom", {}).get("secretKeyRef")
            if ref is not None:
                assert ref["key"] in keys[ref["name"]], (deployment["metadata"]["name"], ref)
    users = {f"KF_NATS_PASSWORD_{n}" for n in ("KF_EVOLVER", "KF_STORE", "KF_LLM", "KF_COMPILER")}
    assert users <= keys["kf-nats-users"]


def test_the_dev_overlay_generates_every_templated_secret_it_needs() -> None:
    (dev,) = load_documents(K8S / "overlays" / "dev" / "kustomization.yaml")
    generated = {g["name"]: {lit.split("=", 1)[0] for lit in g["literals"]} for g in dev["secretGenerator"]}
    keys = _template_keys()
    for name in ("kf-mongodb-auth", "kf-nats-users", "kf-api-token"):
        assert generated[name] == keys[name], name


def test_the_public_apis_check_the_token_and_production_adds_tls(
    deployments: dict[str, dict[str, Any]],
) -> None:
    for name in ("kf-evolver", "kf-store"):
        assert _env(deployments[name])["KF_API_TOKEN"]["secretKeyRef"] == {
            "name": "kf-api-token",
            "key": "token",
        }
    patches = {d["metadata"]["name"]: d for d in load_documents(PRODUCTION / "api-tls.yaml")}
    for name in ("kf-evolver", "kf-store"):
        env = _env(patches[name])
        mount = _container(patches[name])["volumeMounts"][0]["mountPath"]
        assert {env["KF_API_TLS_CERT"], env["KF_API_TLS_KEY"], env["KF_API_TLS_CA"]} == {
            f"{mount}/tls.crt",
            f"{mount}/tls.key",
            f"{mount}/ca.crt",
        }
        assert patches[name]["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == "kf-api-tls"
    (production,) = load_documents(PRODUCTION / "kustomization.yaml")
    assert "api-tls.yaml" in [p.get("path") for p in production["patches"]]
    replicas = [p["patch"] for p in production["patches"] if "KF_STREAM_REPLICAS" in p.get("patch", "")]
    assert replicas and 'value: "3"' in replicas[0]


def test_the_nats_server_accepts_the_configuration(base: list[dict[str, Any]], tmp_path: Path) -> None:
    try:
        binary = server_binary()
    except NatsServerError:
        pytest.skip("nats-server is not installed")
    data = _nats_config(base)
    for name in ("nats.conf", "auth.conf"):
        (tmp_path / name).write_text(data[name].replace("/var/run/nats/", f"{tmp_path}/"))
    env = {"POD_NAME": "kf-nats-0", "PATH": os.environ.get("PATH", "")}
    env |= {u.password_variable: "x" for u in render_users(base)}
    result = subprocess.run(
        [str(binary), "-t", "-c", str(tmp_path / "nats.conf")],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def render_users(base: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    deployments = {o["metadata"]["name"]: o for o in base if o["kind"] == "Deployment"}
    return _users(base, deployments)
