"""The Dockerfile builds the one image the manifests run: right bases, toolchain, user, entry point."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from deploy_tree import DEPLOY

DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
ROOT = DEPLOY.parent


def _stages() -> dict[str, list[str]]:
    """Instructions per stage name, continuation lines joined; ARGs before the first FROM under ''."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    stages: dict[str, list[str]] = {"": []}
    current = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE)
        if match:
            current = match.group(2) or match.group(1)
            stages[current] = [line]
        else:
            stages[current].append(line)
    return stages


def _global_args() -> dict[str, str]:
    return dict(re.match(r"ARG\s+(\w+)=(\S+)", line).groups() for line in _stages()[""])  # type: ignore[union-attr]


def _last_stage() -> str:
    return list(_stages())[-1]


def test_default_target_is_python_3_12_slim_and_cuda_target_is_the_nvidia_devel_image() -> None:
    args = _global_args()
    stages = _stages()
    assert _last_stage() == "runtime"
    assert stages["runtime"][0].startswith("FROM ${PYTHON_IMAGE}")
    assert args["PYTHON_IMAGE"].startswith("python:3.12-slim")
    assert stages["cuda"][0].startswith("FROM ${CUDA_IMAGE}")
    assert args["CUDA_IMAGE"].startswith("nvidia/cuda:") and "devel" in args["CUDA_IMAGE"]


def test_service_stages_install_gpp_torch_and_the_project_wheel() -> None:
    stages = _stages()
    for name in ("runtime", "cuda"):
        text = "\n".join(stages[name])
        assert re.search(r"apt-get install .*\bg\+\+", text), name
        assert re.search(r"pip install --index-url \"\$\{TORCH_INDEX_URL\}\" torch", text), name
        assert "pip install /wheels/*.whl" in text, name
        assert "from=wheel" in text, name
    assert "pip wheel --no-deps --wheel-dir /wheels ." in "\n".join(stages["wheel"])


def test_images_run_as_the_user_the_manifests_expect(base: list[dict[str, Any]]) -> None:
    uids = {
        obj["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
        for obj in base
        if obj["kind"] == "Deployment"
    }
    assert len(uids) == 1
    (uid,) = uids
    for name in ("runtime", "cuda"):
        assert f"USER {uid}:{uid}" in _stages()[name], name


def test_entry_point_is_the_kernelfoundry_console_script_behind_an_init() -> None:
    for name in ("runtime", "cuda"):
        (entry,) = [line for line in _stages()[name] if line.startswith("ENTRYPOINT")]
        assert entry == 'ENTRYPOINT ["/usr/bin/tini", "--", "kernelfoundry"]'
        assert any(line.startswith("EXPOSE") and "9464" in line.split() for line in _stages()[name])


def test_every_copied_source_exists_in_the_repository() -> None:
    for line in _stages()["wheel"]:
        if line.startswith("COPY"):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), f"Dockerfile copies missing {source}"


def test_dockerignore_keeps_the_virtualenv_and_generated_code_out() -> None:
    ignore = Path(f"{DOCKERFILE}.dockerignore").read_text().splitlines()
    assert "**/.venv" in ignore and "**/.git" in ignore
    assert "src/kernelfoundry/v1/*_pb2*.py" in ignore
