"""The CUDA implicit-GEMM conv family's units (cuda_conv.py, its phased transposes and chains) run under
the CPU emulation of cuda_emulation.py, `cp.async` stages and `mma.sync` included, and match torch on
the CPU on the awkward geometry test_cuda_conv.py judges on a GPU, at the tilings it judges there: one
TF32 product a term at TF32's tolerance, 3xTF32 at KernelBench's float32 tolerance, through the NCHW
input and, where a group's channels run in fours, its NHWC copy."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cuda_emulation import emulated_output, emulation_ready
from test_cuda_conv import (
    CONVS,
    GPU_COMBOS,
    STRIP_COMBOS,
    TF32_TOLERANCE,
    WARPGROUP_COMBOS,
    conv_source,
    conv_task,
    declared,
    layouts,
    suite_task,
)

from kernelfoundry.tasks.model import ShapeVariant, Task
from tests.fixtures.conv_tasks import conv_task as fixture_conv_task
from tests.integration.generators.cuda_judge import with_params

pytestmark = pytest.mark.skipif(not emulation_ready(), reason="needs g++ with C++20 <barrier>")


def assert_combos_match_torch(t: Task, source: Any, combos: list[dict], tf32: bool, tmp_path: Path) -> None:
    """The unit `source` built at each tiling of `combos` (two builds at once: g++ takes most of the
    time) matches torch under the emulation, at TF32's tolerance or KernelBench's float32 one."""
    import torch

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda c: emulated_output(t, with_params(source, c), tmp_path), combos))
    tolerance = 1e-2 if tf32 else 1e-4
    for combo, (got, expected) in zip(combos, results, strict=True):
        torch.testing.assert_close(
            got, expected, rtol=tolerance, atol=tolerance, msg=lambda m, x=combo: f"{x}: {m}"
        )


@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "3xtf32"])
@pytest.mark.parametrize("name", [*CONVS, "batchnorm_relu"])
def test_conv_units_match_torch_under_emulation(name: str, tf32: bool, tmp_path: Path) -> None:
    import torch

    t = suite_task(tf32) if name == "batchnorm_relu" else conv_task(name, tf32)
    tolerance = 1e-2 if tf32 else 1e-4
    units = [(nhwc, combo) for nhwc in layouts(t) for combo in GPU_COMBOS]
    sources = [with_params(conv_source(t, tf32, nhwc), combo) for nhwc, combo in units]
    with ThreadPoolExecutor(2) as pool:  # g++ takes most of the time
        results = list(pool.map(lambda s: emulated_output(t, s, tmp_path), sources))
    for (nhwc, combo), (got, expected) in zip(units, results, strict=True):
        label = f"{combo}, channels-last {nhwc}"
        torch.testing.assert_close(
            got, expected, rtol=tolerance, atol=tolerance, msg=lambda m, x=label: f"{x}: {m}"
        )


@pytest.mark.parametrize(
    "params",
    [{"KF_WIDE_FRAGS": 1}, {"KF_WIDE_FRAGS": 1, "BK": 32, "BM": 128}, {"KF_WIDE_FRAGS": 0, "KF_LDSM": 0}],
)
def test_the_channels_last_one_product_conv_pairs_its_16_byte_fragments(params: dict, tmp_path: Path) -> None:
    """TC_STEP_K16 reads a thread's k slots 4 tig .. 4 tig + 3 of an A row and a B row at once and feeds
    them to two k8 MMAs: A's and B's slots must pair (a slot of one against another's would sum wrong
    products), the unpadded stage rows stay 16-byte aligned (the emulation checks every float4 access)
    and a K that ends inside a k16 reads the zeros past it. Against the 4-byte reads (KF_WIDE_FRAGS 0 with
    ldmatrix off)."""
    import torch

    t = conv_task("2d_grouped_vec", True)  # K = 36 a group: two k16 and four k past them
    got, expected = emulated_output(t, with_params(conv_source(t, True, True), params), tmp_path)
    torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "3xtf32"])
@pytest.mark.parametrize(
    "params",
    [{"BK": 8, "KF_WN": 4, "BM": 32}, {"BK": 16}, {"BK": 32, "BM": 128, "KF_STAGES": 4}],
    ids=["bk8-wn4", "defaults", "bk32-bm128"],
)
def test_the_channels_last_conv_reads_its_fragments_by_ldmatrix(
    params: dict, tf32: bool, tmp_path: Path
) -> None:
    """TC_STEP_LDSM hands each lane its A and B fragments by ldmatrix: lanes 8 i .. 8 i + 7 name the rows
    of matrix i (A: rows 0-15 at k 0-3, then at k 4-7; B: two n8 tiles' pixels at k 0-3 and 4-7). A lane
    naming the wrong row or k half sums wrong products; a row off its 16-byte alignment fails the
    emulation's check; a K that ends inside a k8 reads the zeros past it. One TF32 product (its operands
    pre-rounded) and 3xTF32 (split after the read), against torch."""
    import torch

    t = conv_task("2d_grouped_vec", tf32)  # K = 36 a group: four k8 and four k past them
    source = with_params(conv_source(t, tf32, True), {**params, "KF_LDSM": 1})
    got, expected = emulated_output(t, source, tmp_path)
    tolerance = 1e-2 if tf32 else 1e-4
    torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance)


OFF_GRID = 1 + 2**-11 + 2**-13  # TF32 keeps 10 mantissa bits: nearest is 1 + 2^-10, truncation 1


def constant_conv(x: float, w: float) -> Task:
    source = f"""import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 4, 3, bias=False)
        with torch.no_grad():
            self.conv.weight.fill_({w!r})
    def forward(self, x):
        return self.conv(x)
def get_inputs():
    return [torch.full((2, 8, 6, 7), {x!r})]
def get_init_inputs():
    return []
"""
    return Task("conv_constant", source, shapes=(ShapeVariant("full"),), tolerance=TF32_TOLERANCE)


@pytest.mark.parametrize("operand", ["input", "filters"])
def test_the_channels_last_tf32_conv_rounds_its_operands_to_nearest_where_it_stages_them(
    operand: str, tmp_path: Path
) -> None:
    """With one TF32 product the NHWC copy and the filter copy round every value (KF_PREROUNDED): the
    MMA, which ignores a TF32 operand's 13 low bits, would otherwise truncate. An off-grid operand
    beside an exact one of 1.0: every output sums 72 products of 1 + 2^-10 exactly."""
    import torch

    x, w = (OFF_GRID, 1.0) if operand == "input" else (1.0, OFF_GRID)
    task = constant_conv(x, w)
    source = conv_source(task, tf32=True, channels_last=True)
    assert "#define KF_PREROUNDED 1" in source.code
    got, _ = emulated_output(task, source, tmp_path)
    assert torch.equal(got, torch.full_like(got, 72 * (1 + 2**-10)))


@pytest.mark.parametrize("name", ["2d_grouped_vec", "2d_runs", "t3d_runs", "t2d_runs", "1d_dilated"])
def test_the_channels_last_conv_multiplies_by_warpgroups(name: str, tmp_path: Path) -> None:
    """KF_WGMMA 1 (cuda_conv_wgmma.py): the gathers write each 16-byte run at its swizzled place, the
    warpgroups' descriptors name their slabs and k8 steps, the accumulators land where WG_LAYOUT says, at
    every BM (32 runs as 64), both tile widths and the shallowest and deepest pipelines: a K that ends
    inside a slice (36 a group), slices that span taps, a phased grouped transpose, positions outside the
    input on both sides; against torch at TF32's tolerance."""
    import torch

    t = conv_task(name, True)
    sources = [with_params(conv_source(t, True, True), combo) for combo in WARPGROUP_COMBOS]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda s: emulated_output(t, s, tmp_path), sources))
    for combo, (got, expected) in zip(WARPGROUP_COMBOS, results, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-2, msg=lambda m, x=combo: f"{x}: {m}")


@pytest.mark.parametrize("name", ["1d_strip", "3d_strip", "t2d_runs", "2d_grouped_vec"])
def test_the_warpgroup_conv_reads_one_strip_for_a_rows_taps(name: str, tmp_path: Path) -> None:
    """KF_WG_STRIP 1 (cuda_conv_strip.py): a stage's strip of input pixels read by every tap of the last
    axis through descriptors started the tap's rows into it (a transposed conv's from the far end), the
    tiles of a row ending with it, a partial channel slice, rows and columns outside the input, groups;
    at both BM (BM 128 at 256 pixels falls back to the gathers where its stages do not fit) and tile
    widths; against torch at TF32's tolerance."""
    import torch

    t = conv_task(name, True)
    source = conv_source(t, True, True)
    combos = declared(source, STRIP_COMBOS)
    assert combos == STRIP_COMBOS, f"{name}: the strip does not apply"
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda c: emulated_output(t, with_params(source, c), tmp_path), combos))
    for combo, (got, expected) in zip(combos, results, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-2, msg=lambda m, x=combo: f"{x}: {m}")


SPAN_DEPTH_COMBOS = [  # the span's 16-channel stages (KF_SPAN_CH 16): at the defaults, and 128 x 128 tiles
    # of two stages
    {"KF_SPAN": 1, "KF_SPAN_CH": 16},
    {"KF_SPAN": 1, "KF_SPAN_CH": 16, "BM": 128, "KF_STAGES": 2, "KF_WN": 4},
]


@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "3xtf32"])
@pytest.mark.parametrize("name", ["1d_span", "t1d_span", "3d_pointwise_span", "pointwise_tail", "1d_dilated"])
def test_the_span_stages_of_16_channels_match_torch(name: str, tf32: bool, tmp_path: Path) -> None:
    """KF_SPAN_CH 16 (cuda_conv_span.py): a stage holds 16 channels' spans and filters, a k8 step half a
    tap's channels; channel-major filter rows (forward, odd taps) and (tap, channel) ones (transposed),
    16-byte and 4-byte copies, partial slices (12 and 5 channels a group) and groups."""
    t = conv_task(name, tf32)
    source = conv_source(t, tf32)
    assert declared(source, SPAN_DEPTH_COMBOS) == SPAN_DEPTH_COMBOS, f"{name}: no 16-channel span stages"
    assert_combos_match_torch(t, source, SPAN_DEPTH_COMBOS, tf32, tmp_path)


# Pointwise convs over several pixel tiles, the last partial, partial output-channel tiles and partial k
# slices (20 channels): planes of a multiple of 4 (16-byte copies) and of 405 (4-byte copies); and
# 3d_pointwise_span's planes of 105 in two groups
POINTWISE_GATHERS = {
    "pointwise_rows": ("nn.Conv2d(20, 36, 1)", "torch.relu(self.conv(x)) * 0.5", "3, 20, 20, 30"),
    "pointwise_odd_rows": ("nn.Conv2d(20, 36, 1)", "self.conv(x)", "2, 20, 15, 27"),
}
POINTWISE_COMBOS = [  # the gather (the span off) at the defaults, 128-row tiles of both warp widths (the
    # wide ones level1/87's default), and the deep slices
    {"KF_SPAN": 0},
    {"KF_SPAN": 0, "BM": 128, "BK": 8, "KF_STAGES": 2, "KF_WN": 4},
    {"KF_SPAN": 0, "BM": 128, "KF_WN": 8, "KF_MIN_BLOCKS": 1},
    {"KF_SPAN": 0, "BM": 32, "BK": 32, "KF_STAGES": 4},
]


@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "3xtf32"])
@pytest.mark.parametrize("name", [*POINTWISE_GATHERS, "3d_pointwise_span"])
def test_the_pointwise_gather_copies_runs_of_the_planes(name: str, tf32: bool, tmp_path: Path) -> None:
    """A pointwise conv's B slices (cuda_conv._POINTWISE_LOAD_B) are runs of the input's planes: 16
    bytes a copy where the planes are 16-byte aligned, else 4 bytes; zeros past N and past K."""
    if name in POINTWISE_GATHERS:
        module, body, shape = POINTWISE_GATHERS[name]
        t = fixture_conv_task(f"conv_{name}", module, shape, body, TF32_TOLERANCE if tf32 else None)
    else:
        t = conv_task(name, tf32)
    source = conv_source(t, tf32)
    assert "if (a_vec & 2) {" in source.code
    assert_combos_match_torch(t, source, POINTWISE_COMBOS, tf32, tmp_path)


ROUNDED_COMBOS = [  # the filters rounded to TF32 before the kernel: the gather, the span, a 128-row tile
    {"KF_A_ROUNDED": 1, "KF_SPAN": 0},
    {"KF_A_ROUNDED": 1, "KF_SPAN": 1},
    {"KF_A_ROUNDED": 1, "KF_SPAN": 0, "BM": 128, "KF_WN": 8, "KF_MIN_BLOCKS": 1},
]


@pytest.mark.parametrize("name", ["pointwise_tail", "1d_span", "t1d_span"])
def test_the_one_product_nchw_conv_may_take_its_filters_rounded_before_the_kernel(
    name: str, tmp_path: Path
) -> None:
    """KF_A_ROUNDED 1: the filters rounded to TF32 into scratch by kf_round_filters, their fragment reads
    taking the bits as they are (cuda_gemm_tc.kf_split_tf32_a); forward and transposed filter layouts,
    groups, the tail. The same TF32 products in the same order as rounding at every read: the outputs
    are identical to KF_A_ROUNDED 0's, and within TF32's tolerance of torch."""
    import torch

    t = conv_task(name, True)
    source = conv_source(t, True)
    combos = declared(source, ROUNDED_COMBOS)
    assert combos == ROUNDED_COMBOS, f"{name}: no pre-rounded filters"
    assert "KF_A_ROUNDED" not in {p.name for p in conv_source(t, False).tunables}  # 3xTF32 needs the rest
    pairs = [c | {"KF_A_ROUNDED": rounded} for c in combos for rounded in (1, 0)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda c: emulated_output(t, with_params(source, c), tmp_path), pairs))
    for combo, (got, expected), (per_read, _) in zip(combos, results[::2], results[1::2], strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-2, msg=lambda m, x=combo: f"{x}: {m}")
        assert torch.equal(got, per_read), f"{combo}: not the products of rounding at every read"
