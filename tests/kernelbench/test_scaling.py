"""Reduced sizes for KernelBench tasks (kernelfoundry.tasks.scaling): the search with a fake cost,
then the meta-device measure on real task files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kernelfoundry.tasks.scaling import Cost, SizeRejected, measure_on_meta, reduced_sizes

KERNELBENCH = Path(__file__).resolve().parents[2] / ".." / "shared" / "kernelbench"

MATMUL = """
import torch
M = 1024 * 2
K = 4095
N = 64
scale = 2.0
dim = 1
kernel_size = 512
bias_shape = (N, 1)
"""


def product_cost(names: tuple[str, ...], defaults: Mapping[str, int]) -> Any:
    """A fake measure: the product of the named constants (overrides over defaults) as both costs."""

    def measure(source: str, overrides: Mapping[str, Any]) -> Cost:
        values = {**defaults, **overrides}
        work = 1
        for n in names:
            work *= values[n]
        return Cost(work, work)

    return measure


def test_sizes_halve_largest_first_keep_parity_and_recompute_derived_constants() -> None:
    measure = product_cost(("M", "K", "N"), {"M": 2048, "K": 4095, "N": 64})
    got = reduced_sizes(MATMUL, max_elements=2**18, max_flops=2**18, measure=measure)
    assert got["K"] % 2 == 1  # an odd row stays odd
    assert got["M"] * got["K"] * got.get("N", 64) <= 2**18
    assert "kernel_size" not in got and "dim" not in got and "scale" not in got
    if "N" in got:
        assert got["bias_shape"] == (got["N"], 1)


def test_a_task_within_the_budget_is_left_alone() -> None:
    measure = product_cost(("M",), {"M": 2048})
    assert reduced_sizes(MATMUL, max_elements=2**20, max_flops=2**20, measure=measure) == {}


def test_equal_sizes_shrink_together() -> None:
    source = "height = width = 256\nchannels = 64\n"
    measure = product_cost(("height", "width", "channels"), {"height": 256, "width": 256, "channels": 64})
    got = reduced_sizes(source, max_elements=2**12, max_flops=2**12, measure=measure)
    assert got["height"] == got["width"]


def test_a_size_the_reference_rejects_stays_and_the_others_shrink() -> None:
    source = "length = 64\nbatch_size = 128\n"

    def measure(source: str, overrides: Mapping[str, Any]) -> Cost:
        values = {"length": 64, "batch_size": 128, **overrides}
        if values["length"] < 64:
            raise SizeRejected("window larger than the input")
        work = values["length"] * values["batch_size"]
        return Cost(work, 0)

    got = reduced_sizes(source, max_elements=256, max_flops=1, measure=measure)
    assert got == {"batch_size": 4}


def test_tied_sizes_shrink_together_when_none_can_alone() -> None:
    source = "channels = 64\nwidth = 32\n"

    def measure(source: str, overrides: Mapping[str, Any]) -> Cost:
        values = {"channels": 64, "width": 32, **overrides}
        if values["channels"] != 2 * values["width"]:
            raise SizeRejected("LayerNorm over the width expects `channels` features")
        return Cost(values["channels"] * values["width"], 0)

    got = reduced_sizes(source, max_elements=128, max_flops=1, measure=measure)
    assert got == {"channels": 16, "width": 8}


def test_unparsable_source_gives_no_overrides() -> None:
    assert reduced_sizes("def (:", measure=product_cost((), {})) == {}


ELEMENTWISE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

batch_size = 4096
dim = 393216

def get_inputs():
    return [torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
"""


def test_meta_measure_sees_tensor_sizes_and_rejects_a_broken_reference() -> None:
    pytest.importorskip("torch")
    assert measure_on_meta(ELEMENTWISE, {"batch_size": 2, "dim": 8}) == Cost(16, 0)
    got = reduced_sizes(ELEMENTWISE, max_elements=2**16)
    assert got["batch_size"] * got["dim"] <= 2**16
    with pytest.raises(SizeRejected):
        measure_on_meta(ELEMENTWISE.replace("torch.relu(x)", "x @ x"), {"batch_size": 2, "dim": 8})


@pytest.mark.skipif(not KERNELBENCH.is_dir(), reason="../shared/kernelbench is absent")
def test_every_kernelbench_task_fits_the_default_cpu_budget() -> None:
    pytest.importorskip("torch")
    files = sorted(KERNELBENCH.glob("level[12]/*.py"))
    assert files
    over = []
    for path in files:
        source = path.read_text()
        cost = measure_on_meta(source, reduced_sizes(source))
        if not cost.within(2**22, 2**28):
            over.append(f"{path.name}: {cost}")
    assert not over, over
