"""Operands that vary along one dim inside a reduction or row op (plan.axis_leaf): on CUDA a conv's
bias or a per-channel operand before a norm, a softmax or a reduction over the channels or each
channel's positions, a per-column one before a row softmax or mean, is read in the step itself, with
no intermediate written before it (a whole pass over the conv's output less); the CUDA seeds of these
cases run under emulation in test_cuda_kernel_paths.py. The CPU's plans write it out first, and every
CPU seed matches torch. A group norm of several channels a group reads a per-channel operand by its
channel only where the prologue is affine; after a sigmoid it keeps its intermediate."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_cpu_kernelbench_idioms import run
from test_cuda_kernel_paths import CASES
from test_cuda_op_kernels import TEMPLATE

from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.generators.heuristic.plan import partition
from kernelfoundry.generators.heuristic.unbias import unbias_convs
from kernelfoundry.tasks.model import ShapeVariant, Task

READ_IN_THE_STEP = [
    "conv_bias_instance_norm",
    "conv_bias_instance_norm_long_rows",
    "channel_scaled_global_mean",
    "conv3d_bias_layer_norm",
    "channel_shifted_middle_mean",
    "channel_scaled_softmax_rows",
    "conv_bias_channel_min",
    "channel_centred_by_channel_mean",
    "channel_scaled_softmax_channels",
    "channel_shifted_logsumexp_channels",
    "column_shifted_row_mean",
    "column_shifted_long_row_sum",
    "column_shifted_layer_norm",
    "column_scaled_row_softmax",
    "conv_bias_group_norm_two_groups",
    "conv_bias_group_norm_long_rows",
]
# a group norm of several channels a group after a sigmoid: evaluated in each of the norm's passes, the
# prologue would cost more than the pass that writing it out once costs
VARYING_IN_A_ROW = ["conv_bias_sigmoid_group_norm"]


def task_for(case: str) -> Task:
    init, args, body, inputs = CASES[case]
    return Task(case, TEMPLATE.format(init=init, args=args, body=body, inputs=inputs), (ShapeVariant("s"),))


def materialised_inputs(case: str, backend: str) -> list[str]:
    """Inputs of the fused plan's reductions and row ops that a pointwise step writes first."""
    graph = HeuristicGenerator().settled(task_for(case), backend)
    if backend == "cuda":
        graph = unbias_convs(graph)  # the CUDA seeds' conv leaves its bias to the generated part
    found = []
    for part in partition(graph, True, axis_leaves=backend == "cuda"):
        written = {s.out for s in part.steps if s.kind == "pointwise"}
        for step in part.steps:
            src = step.root.args[0] if step.root.args else None
            if step.kind != "pointwise" and getattr(src, "name", None) in written:
                found.append(src.name)
    return found


@pytest.mark.parametrize("case", READ_IN_THE_STEP)
def test_a_value_per_row_is_read_inside_the_step_on_cuda(case: str) -> None:
    assert materialised_inputs(case, "cuda") == []


@pytest.mark.parametrize("case", [c for c in READ_IN_THE_STEP if "self.s =" in CASES[c][0]])
def test_the_cpu_writes_such_a_prologue_out_first(case: str) -> None:
    """On the CPU at KernelBench's reduced sizes reading it in the step was no faster
    (bench/results/seed_ab_axis_leaves_cpu.json): every pass of a norm evaluated the prologue again.
    (The CPU keeps a conv's bias in the conv: only the cases with a parameter of their own have one.)"""
    assert materialised_inputs(case, "cpu") != []


@pytest.mark.parametrize("case", VARYING_IN_A_ROW)
def test_a_value_that_varies_inside_a_row_keeps_its_intermediate(case: str) -> None:
    assert materialised_inputs(case, "cuda") != []


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("case", [*READ_IN_THE_STEP, *VARYING_IN_A_ROW])
def test_every_cpu_seed_matches_torch(case: str, tmp_path: Path) -> None:
    task = task_for(case)
    result = HeuristicGenerator().generate_sync(GenerationRequest("t", task, "cpu", count=8))
    assert result.candidates, result.message
    for candidate in result.candidates:
        run(candidate.source, task, tmp_path, {})
