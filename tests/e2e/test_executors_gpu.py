"""End to end on a GPU host: `up` starts one executor per visible GPU, each pinned to its device.

Skipped without a GPU. With one GPU it checks the pinning and the records' device; with two or more, that
the runs' candidates are spread over every GPU's executor and none is evaluated twice.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kernelfoundry.client import KernelFoundryClient
from kernelfoundry.stack.hardware import cpu_target, cuda_targets
from kernelfoundry.stack.supervisor import Stack
from kernelfoundry.v1 import run_pb2

from .test_stack import FAST_ENV, chain_task, relu_task, wait_finished, wait_lineage_complete

GPUS = cuda_targets()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.gpu,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not GPUS, reason="needs a GPU (nvidia-smi lists none)"),
]


def test_one_executor_per_gpu_each_evaluating_on_its_own_device(tmp_path: Path) -> None:
    target = GPUS[0]
    stack = Stack(
        state_dir=tmp_path / "stack", hardware=[cpu_target(), target], extra_env=FAST_ENV, cpu_executors=0
    )
    stack.start()
    client = KernelFoundryClient(stack.grpc_address)
    try:
        executors = {s.name: s for s in stack.executor_services()}
        assert set(executors) == {f"executor:{target.execute}:{i}" for i in target.devices}
        for name, service in executors.items():
            assert service.env["CUDA_VISIBLE_DEVICES"] == name.rsplit(":", 1)[1]
        config = run_pb2.RunConfig(hardware=target.execute, iterations=2, population=4, sweeps=False, seed=1)
        runs = [client.submit(chain_task(), config), client.submit(relu_task(), config)]
        by_executor: Counter[str] = Counter()
        for run_id in runs:
            final = wait_finished(client, run_id, timeout_s=600)
            assert final.status == run_pb2.RUN_STATUS_COMPLETED, final.message
            _, evaluations, _, _, _ = wait_lineage_complete(stack, run_id)
            evaluated = [e.candidate_id for e in evaluations]
            assert len(evaluated) == len(set(evaluated)), f"a candidate of {run_id} was evaluated twice"
            for record in evaluations:
                executor = record.details["executor"]
                assert executor["device"] == f"cuda:{executor['name'].rsplit(':', 1)[1]}"
                assert record.details["device"] in ("cuda:0", "")  # each process sees only its GPU
                by_executor[executor["name"]] += 1
        if len(executors) > 1:
            assert set(by_executor) == set(executors), f"evaluations per executor: {dict(by_executor)}"
        print(f"evaluations per executor: {dict(by_executor)}")
    finally:
        client.close()
        stack.stop()
