"""The judge runs the task's reference (client code): it is sandboxed like the runner.

The reference below probes its surroundings and makes its answer wrong when it can see the service's
environment, open a TCP connection to the service's host or write outside its scratch folder; the honest
FMA unit then agrees with it only if every probe failed.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from evaluation_fixtures import FAST, Units

from kernelfoundry.evaluation import EvaluationRequest, EvaluationWorker
from kernelfoundry.tasks.model import ShapeVariant, Task

PROBING_REFERENCE = """
import os, socket
import torch
from torch import nn

N = 4096
seen = []
if os.environ.get("KF_SERVICE_SECRET_CANARY"):
    seen.append("environment")
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
    seen.append("network")
except OSError:
    pass
try:
    with open({proof!r}, "w") as f:
        f.write("written by the reference")
    seen.append("file")
except OSError:
    pass


class Model(nn.Module):
    def forward(self, a, b):
        return a * b + a + len(seen)


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
"""


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                server.accept()[0].close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def test_the_reference_sees_no_service_secret_no_network_and_no_file_outside_scratch(
    units: Units, listener: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KF_SERVICE_SECRET_CANARY", "do-not-leak")
    proof = tmp_path / "proof"
    task = Task(
        name="probing_fma",
        reference_source=PROBING_REFERENCE.format(port=listener, proof=str(proof)),
        shapes=(ShapeVariant("default"),),
    )
    request = EvaluationRequest(task, units.source("good_fma"), units.artifact("good_fma"), "cpu", FAST)
    with EvaluationWorker("cpu", cpu_threads=2) as worker:  # a judge started with the canary set
        report = worker.evaluate(request)
        protections = worker.judge_protections
    assert not proof.exists(), "the reference wrote outside its scratch folder"
    assert report.correct, f"the reference saw something it should not: {report.reason}: {report.message}"
    assert any(p.startswith("sandbox:") for p in protections), protections
