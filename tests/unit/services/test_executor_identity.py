"""An executor names itself and its device in the evaluation records it writes and in its busy metric."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kernelfoundry.codec import kernel_to_proto, task_to_proto
from kernelfoundry.evaluation import EvaluationReport, EvaluationRequest, EvaluationSettings
from kernelfoundry.services.executor.handlers import EvaluateHandler
from kernelfoundry.services.executor.identity import executor_identity, host_device
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import build_pb2

from .test_evolver_runs import TASK, kernel


def test_a_pinned_gpu_is_named_as_the_host_names_it() -> None:
    assert host_device("cuda:0", "3") == "cuda:3"
    assert host_device("cuda:1", "4,6") == "cuda:6"
    assert host_device("cuda:0", "GPU-aaaa1111") == "cuda:GPU-aaaa1111"
    assert host_device("cuda:0", None) == "cuda:0"
    assert host_device("cuda:0", "") == "cuda:0"
    assert host_device("cpu", "3") == "cpu"


def test_an_unnamed_executor_takes_the_host_name() -> None:
    assert executor_identity("", "cpu", "node-7", None).name == "node-7"
    named = executor_identity("executor:cuda.h200:2", "cuda:0", "node-7", "2")
    assert named.as_dict() == {"name": "executor:cuda.h200:2", "device": "cuda:2", "host": "node-7"}


class ArtifactBus:
    async def get_artifact(self, name: str) -> bytes:
        return b"\x7fELF"


class ReportingWorker:
    """Answers every evaluation with a correct report, as the judge would on `device`."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.requests: list[EvaluationRequest] = []

    def evaluate(self, request: EvaluationRequest) -> EvaluationReport:
        self.requests.append(request)
        return EvaluationReport(compiled=True, correct=True, runtime_ms=1.0, baseline_ms=2.0, speedup=2.0)


def evaluate(handler: EvaluateHandler, candidate_id: str) -> Any:
    request = build_pb2.EvaluateCandidate(
        candidate_id=candidate_id,
        run_id="run-1",
        source=kernel_to_proto(kernel(1)),
        artifact="artifact-1",
        task=task_to_proto(TASK),
        hardware="cuda.h200",
    )
    [outgoing] = asyncio.run(handler(request, None))  # type: ignore[arg-type]
    return outgoing.message


def test_the_evaluation_record_names_the_executor_and_its_device_and_busy_time_is_counted() -> None:
    metrics = Metrics(process_collectors=False)
    worker = ReportingWorker("cuda:0")
    identity = executor_identity("executor:cuda.h200:5", worker.device, "node-1", "5")
    handler = EvaluateHandler(ArtifactBus(), [worker], EvaluationSettings(), metrics, identity)  # type: ignore[arg-type]
    event = evaluate(handler, "run-1-c1")
    assert worker.requests[0].device == "cuda:0"  # the process sees its one GPU as cuda:0
    details = json.loads(event.details_json)
    assert details["executor"] == {"name": "executor:cuda.h200:5", "device": "cuda:5", "host": "node-1"}
    busy = metrics.registry.get_sample_value(
        "kf_executor_busy_seconds_total", {"hardware": "cuda.h200", "device": "cuda:5"}
    )
    assert busy is not None and busy > 0
    again = evaluate(handler, "run-1-c1")  # a redelivery is answered from memory, not evaluated again
    assert json.loads(again.details_json)["executor"]["name"] == "executor:cuda.h200:5"
    assert len(worker.requests) == 1
