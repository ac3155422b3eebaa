"""Hardware detection and the processes `up` starts for it (no GPU needed: nvidia-smi output is given)."""

from __future__ import annotations

from pathlib import Path

from kernelfoundry.stack.hardware import HardwareTarget, cpu_target, parse_gpu_list
from kernelfoundry.stack.supervisor import Stack

SMI = """0, NVIDIA H200, 9.0
1, NVIDIA H200, 9.0
2, NVIDIA A100-SXM4-80GB, 8.0
"""


def test_gpus_of_one_model_share_a_target_and_keep_their_indices() -> None:
    assert parse_gpu_list(SMI) == [
        HardwareTarget("cuda.h200", "cuda.sm90", (0, 1)),
        HardwareTarget("cuda.a100", "cuda.sm80", (2,)),
    ]


def test_unparsable_lines_are_ignored() -> None:
    assert parse_gpu_list("No devices were found\n") == []


def test_up_starts_one_executor_per_gpu_and_one_compiler_for_every_build_target(tmp_path: Path) -> None:
    stack = Stack(state_dir=tmp_path, hardware=[cpu_target(), *parse_gpu_list(SMI)])
    stack.nats_url = "nats://127.0.0.1:1"
    specs = {s.name: s for s in stack._service_specs()}
    executors = {name: s.env for name, s in specs.items() if name.startswith("executor")}
    assert set(executors) == {
        f"executor:{cpu_target().execute}",
        "executor:cuda.h200:0",
        "executor:cuda.h200:1",
        "executor:cuda.a100:2",
    }
    assert executors["executor:cuda.h200:1"]["CUDA_VISIBLE_DEVICES"] == "1"
    assert executors["executor:cuda.h200:1"]["KF_HARDWARE"] == "cuda.h200"
    assert set(specs["compiler"].env["KF_HARDWARE"].split(",")) == {
        cpu_target().build,
        "cuda.sm90",
        "cuda.sm80",
    }
