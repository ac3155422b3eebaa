"""The Kubernetes manifests parse, reference what exists, and keep the promises the services rely on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deploy_tree import BASE, DEPLOY, K8S, load_documents

from kernelfoundry.telemetry.endpoint import LIVENESS_PATH, METRICS_PATH, READINESS_PATH

SERVICES = {"evolver", "llm", "compiler", "executor", "store"}
WORKERS = {"kf-llm", "kf-compiler-cpu", "kf-compiler-cuda", "kf-executor-cpu", "kf-executor-gpu"}
QUEUE_SCALED = {"kf-compiler-cpu", "kf-compiler-cuda", "kf-executor-cpu", "kf-executor-gpu"}
KUSTOMIZATIONS = sorted(DEPLOY.rglob("kustomization.yaml"))


def _pod(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def _pod_labels(workload: dict[str, Any]) -> dict[str, str]:
    return workload["spec"]["template"]["metadata"]["labels"]


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = _pod(deployment)["containers"]
    return container


def _env(deployment: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in _container(deployment).get("env", [])}


def _config(base: list[dict[str, Any]]) -> dict[str, str]:
    (config,) = [o for o in base if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "kf-config"]
    return config["data"]


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@pytest.mark.parametrize("path", sorted(DEPLOY.rglob("*.yaml")), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_document_loads(path: Path) -> None:
    documents = load_documents(path)
    assert documents, f"{path} holds no YAML document"
    if path.is_relative_to(K8S):
        for doc in documents:
            assert {"apiVersion", "kind"} <= doc.keys(), f"{path}: a document without apiVersion/kind"
            if doc["kind"] not in ("Kustomization", "Component"):
                assert doc.get("metadata", {}).get("name"), f"{path}: a {doc['kind']} without a name"


@pytest.mark.parametrize("path", KUSTOMIZATIONS, ids=lambda p: str(p.parent.relative_to(DEPLOY)))
def test_kustomization_references_exist(path: Path) -> None:
    (kustomization,) = load_documents(path)
    root = path.parent
    referenced = list(kustomization.get("resources", [])) + list(kustomization.get("components", []))
    referenced += [p["path"] for p in kustomization.get("patches", []) if "path" in p]
    for generator in kustomization.get("configMapGenerator", []) + kustomization.get("secretGenerator", []):
        referenced += [entry.split("=", 1)[-1] for entry in generator.get("files", [])]
    for reference in referenced:
        assert (root / reference).exists(), f"{path} refers to missing {reference}"


def test_every_resource_file_in_a_kustomization_folder_is_listed_or_a_template() -> None:
    for folder in {p.parent for p in KUSTOMIZATIONS}:
        (kustomization,) = load_documents(folder / "kustomization.yaml")
        listed = set(kustomization.get("resources", []))
        listed |= {p["path"] for p in kustomization.get("patches", []) if "path" in p}
        for file in folder.glob("*.yaml"):
            if file.name == "kustomization.yaml" or ".template." in file.name:
                continue
            assert file.name in listed, f"{file} is neither listed in its kustomization nor a template"


def test_every_service_runs_as_a_deployment_of_the_one_image(deployments: dict[str, dict[str, Any]]) -> None:
    served = set()
    for name, deployment in deployments.items():
        container = _container(deployment)
        assert container["image"] in ("kernelfoundry", "kernelfoundry-cuda"), name
        assert container["args"][0] == "serve", name
        served.add(container["args"][1])
    assert served == SERVICES


def test_every_deployment_serves_metrics_and_probes_on_the_configured_port(
    base: list[dict[str, Any]], deployments: dict[str, dict[str, Any]]
) -> None:
    port = int(_config(base)["KF_METRICS_PORT"])
    for name, deployment in deployments.items():
        container = _container(deployment)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports.get("metrics") == port, name
        probes = {
            kind: container[kind]["httpGet"] for kind in ("livenessProbe", "readinessProbe", "startupProbe")
        }
        assert probes["livenessProbe"] == {"path": LIVENESS_PATH, "port": "metrics"}, name
        assert probes["readinessProbe"] == {"path": READINESS_PATH, "port": "metrics"}, name
        assert container["startupProbe"]["httpGet"]["port"] == "metrics", name
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true", name
        assert annotations["prometheus.io/port"] == str(port), name
        assert annotations["prometheus.io/path"] == METRICS_PATH, name


def test_every_deployment_reads_the_shared_config_map(deployments: dict[str, dict[str, Any]]) -> None:
    for name, deployment in deployments.items():
        sources = _container(deployment)["envFrom"]
        assert {"configMapRef": {"name": "kf-config"}} in sources, name


def test_config_map_holds_every_kf_setting_the_services_need(base: list[dict[str, Any]]) -> None:
    config = _config(base)
    assert all(key.startswith("KF_") for key in config)
    for key in (
        "KF_NATS_URL",
        "KF_STATE_DIR",
        "KF_METRICS_PORT",
        "KF_LOG_LEVEL",
        "KF_LOG_FORMAT",
        "KF_GENERATOR",
    ):
        assert key in config
    assert config["KF_LOG_FORMAT"] in ("json", "console")
    assert config["KF_NATS_URL"] == "nats://kf-nats:4222"


def test_every_pod_runs_non_root_without_privileges(base: list[dict[str, Any]]) -> None:
    for obj in base:
        if obj["kind"] not in ("Deployment", "StatefulSet"):
            continue
        pod = obj["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, obj["metadata"]["name"]
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, container["name"]
            assert context["capabilities"] == {"drop": ["ALL"]}, container["name"]
            assert "memory" in container["resources"]["limits"], container["name"]
            assert "memory" in container["resources"]["requests"], container["name"]


def test_kernelfoundry_containers_have_read_only_roots_with_writable_tmp_and_state(
    base: list[dict[str, Any]], deployments: dict[str, dict[str, Any]]
) -> None:
    state_dir = _config(base)["KF_STATE_DIR"]
    for name, deployment in deployments.items():
        container = _container(deployment)
        assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/tmp", state_dir} <= mounts, name


def test_gpu_executor_takes_exactly_one_gpu_on_tainted_gpu_nodes(
    deployments: dict[str, dict[str, Any]],
) -> None:
    deployment = deployments["kf-executor-gpu"]
    pod = deployment["spec"]["template"]["spec"]
    container = _container(deployment)
    assert container["args"] == ["serve", "executor"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert _env(deployment)["KF_HARDWARE"].startswith("cuda.")
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["nodeSelector"]
    assert container["image"] == "kernelfoundry-cuda"


def test_every_executor_pod_names_itself_in_the_records_it_writes(
    deployments: dict[str, dict[str, Any]],
) -> None:
    for name in ("kf-executor-cpu", "kf-executor-gpu"):
        env = {e["name"]: e for e in _container(deployments[name])["env"]}
        source = env["KF_EXECUTOR_NAME"]["valueFrom"]["fieldRef"]["fieldPath"]
        assert source == "metadata.name", name  # one pod, one executor: more GPUs are more replicas


def test_only_the_gpu_executor_requests_a_gpu(deployments: dict[str, dict[str, Any]]) -> None:
    for name, deployment in deployments.items():
        resources = _container(deployment)["resources"]
        asks = set(resources.get("limits", {})) | set(resources.get("requests", {}))
        assert ("nvidia.com/gpu" in asks) == (name == "kf-executor-gpu"), name


def test_compilers_stay_off_gpu_nodes(deployments: dict[str, dict[str, Any]]) -> None:
    for name in ("kf-compiler-cpu", "kf-compiler-cuda"):
        pod = deployments[name]["spec"]["template"]["spec"]
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        expression = terms["nodeSelectorTerms"][0]["matchExpressions"][0]
        assert expression["key"] == "nvidia.com/gpu.present" and expression["operator"] == "NotIn"
        assert "tolerations" not in pod


def test_workers_declare_hardware_their_subjects_accept(deployments: dict[str, dict[str, Any]]) -> None:
    for name, deployment in deployments.items():
        service = _container(deployment)["args"][1]
        if service in ("compiler", "executor"):
            hardware = _env(deployment)["KF_HARDWARE"]
            backend, _, target = hardware.partition(".")
            assert backend in ("cpu", "cuda") and target, f"{name}: KF_HARDWARE={hardware!r}"
    assert _env(deployments["kf-compiler-cuda"])["KF_HARDWARE"] == "cuda.sm90"
    assert _env(deployments["kf-executor-gpu"])["KF_HARDWARE"] == "cuda.h200"


def test_every_worker_has_a_disruption_budget_selecting_its_pods(
    base: list[dict[str, Any]], deployments: dict[str, dict[str, Any]]
) -> None:
    budgets = [o for o in base if o["kind"] == "PodDisruptionBudget"]
    for name in WORKERS:
        labels = deployments[name]["spec"]["template"]["metadata"]["labels"]
        assert any(_matches(b["spec"]["selector"]["matchLabels"], labels) for b in budgets), name


def test_services_select_pods_and_target_named_ports(base: list[dict[str, Any]]) -> None:
    workloads = [o for o in base if o["kind"] in ("Deployment", "StatefulSet")]
    for service in (o for o in base if o["kind"] == "Service"):
        selected = [
            w
            for w in workloads
            if _matches(service["spec"]["selector"], w["spec"]["template"]["metadata"]["labels"])
        ]
        assert selected, f"Service {service['metadata']['name']} selects no pod"
        for port in service["spec"]["ports"]:
            named = {
                p["name"]
                for w in selected
                for c in w["spec"]["template"]["spec"]["containers"]
                for p in c["ports"]
            }
            assert port["targetPort"] in named, (
                f"{service['metadata']['name']}: no container port {port['targetPort']}"
            )


def test_grpc_services_expose_the_configured_ports(base: list[dict[str, Any]]) -> None:
    config = _config(base)
    services = {o["metadata"]["name"]: o for o in base if o["kind"] == "Service"}
    for key, name in (("KF_GRPC_ADDRESS", "kf-evolver"), ("KF_STORE_GRPC_ADDRESS", "kf-store")):
        host, _, port = config[key].rpartition(":")
        assert host == name
        assert [p["port"] for p in services[name]["spec"]["ports"]] == [int(port)]


def test_nats_runs_jetstream_with_a_volume_and_monitoring_port(base: list[dict[str, Any]]) -> None:
    (nats,) = [o for o in base if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "kf-nats"]
    (config,) = [o for o in base if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "kf-nats-config"]
    assert "jetstream" in config["data"]["nats.conf"] and "http_port: 8222" in config["data"]["nats.conf"]
    assert "server_name: $POD_NAME" in config["data"]["nats.conf"]
    container = nats["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].startswith("nats:")
    assert nats["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    assert {"name": "data", "mountPath": "/data"} in container["volumeMounts"]


def test_mongodb_and_store_read_the_auth_secret_keys_of_the_template(
    base: list[dict[str, Any]], deployments: dict[str, dict[str, Any]]
) -> None:
    (template,) = load_documents(BASE / "mongodb-secret.template.yaml")
    keys = set(template["stringData"])
    (mongodb,) = [o for o in base if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "kf-mongodb"]
    consumers = [mongodb["spec"]["template"]["spec"]["containers"][0], _container(deployments["kf-store"])]
    for container in consumers:
        refs = [e["valueFrom"].get("secretKeyRef") for e in container["env"] if "valueFrom" in e]
        mongo = [r for r in refs if r and r["name"] == template["metadata"]["name"]]  # besides NATS, API
        assert mongo and all(r["key"] in keys for r in mongo)
    assert _env(deployments["kf-store"])["KF_STORE_URI"].startswith("mongodb://$(KF_MONGO_USERNAME):")


def test_evolver_keeps_a_single_replica_with_persistent_state(
    base: list[dict[str, Any]], deployments: dict[str, dict[str, Any]]
) -> None:
    evolver = deployments["kf-evolver"]
    assert evolver["spec"]["replicas"] == 1
    assert evolver["spec"]["strategy"]["type"] == "Recreate"
    claims = {
        v["persistentVolumeClaim"]["claimName"]
        for v in evolver["spec"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert claims <= {o["metadata"]["name"] for o in base if o["kind"] == "PersistentVolumeClaim"}
    assert claims


@pytest.mark.parametrize("component", ["keda-autoscaling", "hpa-autoscaling"])
def test_queue_lag_autoscaling_targets_each_worker_and_its_durable_consumer(
    component: str, deployments: dict[str, dict[str, Any]]
) -> None:
    objects = load_documents(
        K8S
        / "components"
        / component
        / ("scaledobjects.yaml" if component.startswith("keda") else "hpas.yaml")
    )
    scaled: dict[str, str] = {}
    for obj in objects:
        target = obj["spec"]["scaleTargetRef"]["name"]
        if obj["kind"] == "ScaledObject":
            (trigger,) = obj["spec"]["triggers"]
            assert trigger["type"] == "nats-jetstream"
            assert trigger["metadata"]["stream"] == "KF_WORK"
            scaled[target] = trigger["metadata"]["consumer"]
        else:
            (metric,) = obj["spec"]["metrics"]
            assert metric["external"]["metric"]["name"] == "kf_queue_lag_messages"
            scaled[target] = metric["external"]["metric"]["selector"]["matchLabels"]["consumer"]
    assert set(scaled) == QUEUE_SCALED
    for name, consumer in scaled.items():
        # The services name their durable consumers <service>-<hardware with dots as dashes>.
        deployment = deployments[name]
        service = _container(deployment)["args"][1]
        assert consumer == f"{service}-{_env(deployment)['KF_HARDWARE'].replace('.', '-')}", name
