"""The C++ pool step (cpu.py, pools.py): every CPU seed of a pooling window beside generated ops (the
pool cases of test_cuda_kernel_paths.py: max and average windows of 1-3 dims, padding, dilation,
PyTorch's average divisors, a pool of a pool, a row op before) matches torch, and the fused seeds
compute the pooling in the unit, not in the glue."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from native import Unit, build_unit
from test_cuda_kernel_paths import CASES, TEMPLATE
from test_cuda_op_kernels import Launcher

from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.tasks.reference import instantiate

POOLS = sorted(c for c in CASES if "pool" in c and "views" not in c)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("case", POOLS)
def test_every_cpu_seed_of_a_pool_tail_matches_torch(case: str, tmp_path: Path) -> None:
    import torch
    from torch import nn

    init, args, body, inputs = CASES[case]
    task = Task(case, TEMPLATE.format(init=init, args=args, body=body, inputs=inputs), (ShapeVariant("s"),))
    result = HeuristicGenerator().generate_sync(GenerationRequest("pools", task, "cpu", count=8))
    kernels = list({c.source.code: c.source for c in result.candidates}.values())
    fused = [k for k in kernels if '"fuse": true' in k.code and '"gemm": true' not in k.code]
    assert fused and all(".pool(" not in k.glue and ".p1(" not in k.glue for k in fused)
    assert all(" d0 = od * " in k.code for k in fused)  # the window loop nest in the unit
    reference = instantiate(task, task.shapes[0], seed=1, device="cpu")
    with torch.no_grad():
        expected = reference.model(*reference.inputs)
    for kernel in kernels:
        glue: dict[str, Any] = {
            "torch": torch,
            "nn": nn,
            "F": torch.nn.functional,
            "kf": Launcher(Unit(build_unit(kernel, tmp_path))),
        }
        exec(compile(kernel.glue, "<glue>", "exec"), glue)
        candidate = glue["ModelNew"]()
        candidate.load_state_dict(reference.model.state_dict())
        with torch.no_grad():
            got = candidate(*reference.inputs)
        variant = kernel.code.splitlines()[1]
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, msg=lambda m, v=variant: f"{v}: {m}")
