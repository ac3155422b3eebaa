"""The CUDA implicit-GEMM conv family (cuda_conv.py) builds with nvcc for sm_90 at every tunable
value (pipelines of 2 to 4 stages), and on a GPU matches the reference on awkward geometry: Conv1d /
Conv2d / Conv3d and their transposes with stride, padding, dilation and groups, channel counts that fill
no tile, pixel counts that are no multiple of the tile or of 4, a bias or none, and a per-channel tail
(inference BatchNorm, ReLU), a conv after a depthwise conv (the depthwise op kernel first, into
scratch); where a group's channels run in fours, through the NHWC copy of the input
as well as in NCHW. 3xTF32 is judged at KernelBench's float32 tolerance; the one-TF32-product
variant at TF32's (1e-2): whether cuDNN runs a small reference conv in TF32, which sets eager's own error
and the judge's floor, is cuDNN's choice."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator, parse_variant
from kernelfoundry.tasks.model import ShapeVariant, Task, Tolerance
from tests.fixtures.conv_tasks import conv_task as fixture_conv_task
from tests.integration.generators.cuda_judge import built_units_and_worker, with_params

TASKS = Path(__file__).resolve().parents[3] / "tasks"
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

CONVS = {  # name: (module, forward expression, input shape)
    "2d_plain": ("nn.Conv2d(3, 5, 3)", "self.conv(x)", "2, 3, 13, 11"),
    "2d_strided": (
        "nn.Conv2d(6, 70, (3, 5), stride=2, padding=(1, 2), dilation=(2, 1))",
        "self.conv(x)",
        "3, 6, 17, 20",
    ),
    "1d_dilated": ("nn.Conv1d(4, 9, 3, stride=3, dilation=4, bias=False)", "self.conv(x)", "2, 4, 301"),
    "3d_padded": ("nn.Conv3d(3, 8, (3, 5, 7), padding=(1, 2, 3))", "self.conv(x)", "2, 3, 5, 9, 11"),
    "pointwise_tail": ("nn.Conv2d(8, 16, 1)", "torch.relu(self.conv(x)) * 0.5", "2, 8, 16, 16"),
    "2d_grouped": ("nn.Conv2d(6, 9, 3, padding=1, groups=3)", "self.conv(x)", "2, 6, 10, 12"),
    # K = 36 a group: the filters' 16-byte copies (a_vec), two groups, three BK 16 slices
    "2d_grouped_vec": ("nn.Conv2d(8, 70, 3, padding=1, groups=2)", "self.conv(x)", "2, 8, 9, 15"),
    "t1d": ("nn.ConvTranspose1d(5, 7, 3)", "self.conv(x)", "2, 5, 33"),
    "t2d_strided": (
        "nn.ConvTranspose2d(4, 6, (3, 5), stride=(2, 3), padding=(1, 2), output_padding=(1, 0),"
        " dilation=(2, 1))",
        "self.conv(x)",
        "2, 4, 7, 9",
    ),
    "t3d_grouped": (
        "nn.ConvTranspose3d(4, 8, 3, stride=2, padding=1, output_padding=1, groups=2, bias=False)",
        "torch.sigmoid(self.conv(x))",
        "1, 4, 4, 5, 6",
    ),
    # phased (cuda_conv_phases.py): stride 5 over 3 dilated taps leaves 16 of 25 phases without a tap (the
    # bias alone); a 1-D one whose kernel is shorter than its stride, output padding past the last tap
    "t2d_sparse": (
        "nn.ConvTranspose2d(3, 10, 3, stride=5, padding=1, dilation=2)",
        "self.conv(x)",
        "2, 3, 6, 9",
    ),
    "t1d_strided": (
        "nn.ConvTranspose1d(6, 5, 2, stride=4, output_padding=3, bias=False)",
        "torch.relu(self.conv(x))",
        "3, 6, 41",
    ),
    # channels in runs of four (the channels-last path too): 12 a group, so a BK 16 or 32 slice spans
    # taps; pixels that fill no tile; strided, padded, dilated; grouped, transposed
    "2d_runs": (
        "nn.Conv2d(12, 20, (3, 5), stride=(1, 2), padding=(2, 1), dilation=(2, 1))",
        "self.conv(x)",
        "2, 12, 15, 17",
    ),
    "t3d_runs": (
        "nn.ConvTranspose3d(8, 12, 3, stride=2, padding=1, output_padding=1, groups=2)",
        "torch.relu(self.conv(x))",
        "1, 8, 3, 4, 5",
    ),
    # transposed of stride 1 in runs of four: its taps linear (the input offset the pixel's minus the
    # tap's), padded and dilated so that positions leave the input on both sides
    "t2d_runs": (
        "nn.ConvTranspose2d(8, 6, (3, 4), padding=(1, 2), dilation=(1, 2))",
        "self.conv(x)",
        "2, 8, 7, 9",
    ),
    # the warpgroup kernel's row strip (cuda_conv_strip.py): 36 channels (a second, partial channel slice),
    # dilated taps past both ends of a 300-pixel row (two or three tiles, the last partial, an odd row);
    # a 3-D one with padding and dilation on every axis, rows outside the input
    "1d_strip": ("nn.Conv1d(36, 40, 5, padding=3, dilation=2)", "self.conv(x)", "2, 36, 299"),
    "3d_strip": (
        "nn.Conv3d(8, 12, (2, 3, 3), padding=(1, 1, 2), dilation=(1, 2, 1))",
        "torch.relu(self.conv(x))",
        "1, 8, 3, 5, 9",
    ),
    # the input span of a 1-D conv read in NCL (cuda_conv_span.py): rows of a multiple of 4 (16-byte
    # copies), padding before the first and past the last (4-byte copies at the edges), a second, partial
    # slice of 8 channels; grouped and transposed, its taps reversed
    "1d_span": ("nn.Conv1d(12, 20, 5, stride=2, padding=3, dilation=2)", "self.conv(x)", "2, 12, 400"),
    "t1d_span": (
        "nn.ConvTranspose1d(10, 6, 4, padding=2, dilation=3, groups=2)",
        "torch.relu(self.conv(x))",
        "2, 10, 64",
    ),
    # a pointwise conv's flattened planes as the span's rows: 105 values (4-byte copies), two groups
    # (pointwise_tail above: planes of 256, 16-byte copies)
    "3d_pointwise_span": ("nn.Conv3d(10, 12, 1, groups=2)", "torch.relu(self.conv(x))", "2, 10, 3, 5, 7"),
    # a conv after a depthwise conv (cuda_conv_chain.py): strided, and a dilated 1-D one with a tail
    "chain_2d": (
        "nn.Sequential(nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8), nn.Conv2d(8, 20, 1))",
        "self.conv(x)",
        "2, 8, 17, 19",
    ),
    "chain_1d_tail": (
        "nn.Sequential(nn.Conv1d(6, 12, 5, dilation=2, groups=6, bias=False),"
        " nn.Conv1d(12, 7, 3, padding=1))",
        "torch.relu(self.conv(x))",
        "2, 6, 101",
    ),
}
CHANNELS_LAST = {
    "1d_dilated",
    "pointwise_tail",
    "2d_grouped_vec",
    "t2d_strided",
    "2d_runs",
    "t3d_runs",
    "t2d_runs",
    "chain_2d",
    "1d_strip",
    "3d_strip",
}
TF32_TOLERANCE = Tolerance(atol=1e-2, rtol=1e-2)
COMBOS = [  # every value of every tunable: each BM, BK and warp width, the deepest and shallowest pipelines
    {"BM": bm, "BK": bk, "KF_WN": wn, "KF_STAGES": stages, "KF_MIN_BLOCKS": b}
    for (bm, bk, wn), (stages, b) in zip(
        itertools.product((32, 64, 128), (8, 16, 32), (4, 8)),
        itertools.cycle([(2, 1), (3, 2), (4, 1), (4, 2)]),
    )
]
GPU_COMBOS = [  # the defaults (BM 32 or 64 for these channel counts, warps of 8 n8 tiles, BN 256), the
    # narrow warps (4 n8 tiles, BN 128) and BM 128
    {},
    {"BM": 128, "BK": 8, "KF_STAGES": 2, "KF_WN": 4},
    {"BM": 128, "BK": 32, "KF_STAGES": 4},
]
FOUR_BYTE_COMBOS = [  # the channels-last units' 4-byte fragment reads (ldmatrix off), at the defaults and
    # the widest slices
    {"KF_LDSM": 0},
    {"KF_LDSM": 0, "BM": 128, "BK": 32, "KF_STAGES": 4, "KF_WN": 4},
]


WARPGROUP_COMBOS = [  # the channels-last TF32 units' warpgroup MMAs (cuda_conv_wgmma.py): each BM (32 runs
    # as 64), both tile widths, the shallowest and deepest pipelines
    {"KF_WGMMA": 1},
    {"KF_WGMMA": 1, "BM": 128, "KF_WG_BN": 256, "KF_STAGES": 4},
    {"KF_WGMMA": 1, "BM": 64, "KF_WG_BN": 256, "KF_STAGES": 2, "KF_MIN_BLOCKS": 1},
    {"KF_WGMMA": 1, "BM": 32, "KF_WG_BN": 128, "KF_STAGES": 3},
]
STRIP_COMBOS = [  # the warpgroup kernel's row strip (cuda_conv_strip.py), where a unit has it: both BM
    # (128 falls back to the gathers where two stages do not fit), both tile widths
    {"KF_WGMMA": 1, "KF_WG_STRIP": 1},
    {"KF_WGMMA": 1, "KF_WG_STRIP": 1, "BM": 128, "KF_WG_BN": 128},
    {"KF_WGMMA": 1, "KF_WG_STRIP": 1, "BM": 32, "KF_WG_BN": 256},
]


def gpu_combos(nhwc: bool, tf32: bool = False) -> list[dict[str, int]]:
    """The tilings the GPU tests judge a unit at: where its rows are NHWC (ldmatrix reads by default), the
    4-byte reads besides, and with one TF32 product the warpgroup MMAs (their row strip where the unit
    has one: `declared` drops the tilings a unit does not declare)."""
    if not nhwc:
        return GPU_COMBOS
    return GPU_COMBOS + FOUR_BYTE_COMBOS + (WARPGROUP_COMBOS + STRIP_COMBOS if tf32 else [])


def declared(source: KernelSource, combos: list[dict[str, int]]) -> list[dict[str, int]]:
    """The tilings among `combos` whose every tunable the unit declares."""
    names = {t.name for t in source.tunables}
    return [c for c in combos if set(c) <= names]


def conv_task(name: str, tf32: bool) -> Task:
    module, body, shape = CONVS[name]
    return fixture_conv_task(f"conv_{name}", module, shape, body, TF32_TOLERANCE if tf32 else None)


def suite_task(tf32: bool) -> Task:
    """tasks/level2_conv_batchnorm_relu at an odd size: a bias and four per-channel BatchNorm operands."""
    source = (TASKS / "level2_conv_batchnorm_relu.py").read_text()
    shape = ShapeVariant(
        "odd", {"batch_size": 2, "in_channels": 5, "out_channels": 67, "height": 19, "width": 23}
    )
    return Task("conv_batchnorm_relu", source, shapes=(shape,), tolerance=TF32_TOLERANCE if tf32 else None)


def all_tasks(tf32: bool) -> list[Task]:
    return [conv_task(name, tf32) for name in CONVS] + [suite_task(tf32)]


def conv_source(t: Task, tf32: bool, channels_last: bool = False) -> KernelSource:
    """The task's implicit-GEMM conv unit: one TF32 product a term, or 3xTF32; the input read in NCHW
    or through its NHWC copy."""
    result = HeuristicGenerator().generate_sync(GenerationRequest("g", t, "cuda", count=16))
    variants = [(c, parse_variant(c.source.code)) for c in result.candidates]
    units = [
        c
        for c, v in variants
        if v is not None and v.gemm and v.tf32 == tf32 and v.channels_last == channels_last
    ]
    assert len(units) == 1, (t.name, result.error, result.message, [v for _, v in variants])
    return units[0].source


def layouts(t: Task) -> tuple[bool, ...]:
    """The input layouts the family reads the task's input in: NCHW, and NHWC where channels run in 4s."""
    return (False, True) if t.name.removeprefix("conv_") in CHANNELS_LAST else (False,)


@pytest.mark.timeout(900)  # some 150 nvcc builds on two cores
def test_every_unit_and_tunable_combination_builds_for_sm90(tmp_path: Path) -> None:
    from kernelfoundry.toolchains import BuildCache, BuildTarget, build

    units = [
        with_params(conv_source(t, tf32, nhwc), {})
        for tf32 in (True, False)
        for t in all_tasks(tf32)
        for nhwc in layouts(t)
    ]
    source = conv_source(conv_task("2d_strided", True), True)
    assert {t.name: t.values for t in source.tunables} == {
        "BM": (32, 64, 128),
        "BK": (8, 16, 32),
        "KF_STAGES": (2, 3, 4),
        "KF_MIN_BLOCKS": (1, 2),
        "KF_WN": (4, 8),
        "KF_A_ROUNDED": (0, 1),
    }
    units += [with_params(source, combo) for combo in COMBOS]
    # the filters rounded before the kernel (one TF32 product, NCHW): the gather, and the span of a
    # pointwise conv and of a 1-D one
    units += [with_params(source, {**combo, "KF_A_ROUNDED": 1}) for combo in COMBOS[::6]]
    for name in ("pointwise_tail", "1d_span"):
        spanned = conv_source(conv_task(name, True), True)
        units += [with_params(spanned, {"KF_A_ROUNDED": 1, "KF_SPAN": span}) for span in (0, 1)]
    runs = conv_source(conv_task("2d_runs", True), True, channels_last=True)
    units += [with_params(runs, combo) for combo in COMBOS]
    # its 16-byte fragment reads (TC_STEP_K16) at every BK of 16 or more
    units += [with_params(runs, {**combo, "KF_WIDE_FRAGS": 1}) for combo in COMBOS if combo["BK"] >= 16]
    # its 4-byte fragment reads (TC_STEP, ldmatrix off), one TF32 product and three: every BM, BK and warp
    # width between the two
    runs3 = conv_source(conv_task("2d_runs", False), False, channels_last=True)
    units += [with_params(runs, {**combo, "KF_LDSM": 0}) for combo in COMBOS[::3]]
    units += [with_params(runs3, {**combo, "KF_LDSM": 0}) for combo in COMBOS[1::3]]
    # the warpgroup MMAs: every BM, tile width, pipeline depth and blocks an SM
    wg = [
        {"KF_WGMMA": 1, "BM": bm, "KF_WG_BN": bn, "KF_STAGES": st, "KF_MIN_BLOCKS": b}
        for (bm, bn), (st, b) in zip(
            itertools.product((32, 64, 128), (128, 256)), itertools.cycle([(2, 1), (3, 2), (4, 1)])
        )
    ]
    units += [with_params(runs, combo) for combo in wg]
    # the row strip: two stages at BM 64, at 128 x 128, and BM 128 at 256 pixels (9 taps: the gathers)
    strip = [{"BM": 64, "KF_WG_BN": 256}, {"BM": 128, "KF_WG_BN": 128}, {"BM": 128, "KF_WG_BN": 256}]
    strips = [("t2d_runs", strip[0]), ("1d_strip", strip[1]), ("1d_strip", strip[2])]
    units += [
        with_params(
            conv_source(conv_task(n, True), True, channels_last=True), {**c, "KF_WGMMA": 1, "KF_WG_STRIP": 1}
        )
        for n, c in strips
    ]
    phased_tf32 = conv_source(conv_task("t3d_runs", True), True, channels_last=True)
    units += [with_params(phased_tf32, combo) for combo in wg[::2]]
    # phased (a strided transposed conv): its tap table in shared memory beside the deepest stages
    phased = conv_source(conv_task("t3d_runs", False), False, channels_last=True)
    units += [with_params(phased, combo) for combo in COMBOS if combo["KF_STAGES"] == 4]
    target, cache = BuildTarget("cuda", "sm90"), BuildCache(tmp_path)
    with ThreadPoolExecutor(4) as pool:
        built = list(pool.map(lambda s: build(s, target, cache), units))
    failed = [(dict(u.params), b.reason, b.log) for u, b in zip(units, built, strict=True) if not b.ok]
    assert not failed, failed


def gpu_cases(
    selected: set[tuple[str, bool]] | None = None,
) -> list[tuple[Task, list[dict[str, int]], bool, bool]]:
    """Every (task, tilings, one TF32 product, channels-last) the GPU tests judge; `selected`: only those
    of these (case name, one TF32 product) pairs."""
    cases = []
    for tf32 in (True, False):
        for t in all_tasks(tf32):
            name = t.name.removeprefix("conv_")
            if selected is None or (name, tf32) in selected:
                cases += [(t, gpu_combos(nhwc, tf32), tf32, nhwc) for nhwc in layouts(t)]
    return cases


def selected_gpu_cases(session: pytest.Session) -> set[tuple[str, bool]]:
    """The (case name, one TF32 product) pairs of the GPU tests this session runs (`-k` narrows them), so
    the fixture builds only their units (a step on the accelerator machine has minutes, not the ten
    an nvcc build of every case takes on one)."""
    picked = set()
    for item in session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.name.startswith("test_conv_units_are_correct_on_awkward_geometry") and "name" in params:
            picked.add((params["name"], bool(params["tf32"])))
    return picked


def test_the_gpu_cases_narrow_to_the_selected_tests() -> None:
    every = gpu_cases()
    assert len(every) == 2 * sum(len(layouts(t)) for t in all_tasks(True))
    chain = gpu_cases({("chain_2d", True), ("batchnorm_relu", False)})
    assert [(t.name, tf32, nhwc) for t, _, tf32, nhwc in chain] == [
        ("conv_chain_2d", True, False),
        ("conv_chain_2d", True, True),
        ("conv_batchnorm_relu", False, False),
    ]
    # what a session running `-k "chain_2d and tf32"` (and an unrelated test) selects
    from types import SimpleNamespace

    items = [
        SimpleNamespace(
            name="test_conv_units_are_correct_on_awkward_geometry[chain_2d-tf32]",
            callspec=SimpleNamespace(params={"name": "chain_2d", "tf32": True}),
        ),
        SimpleNamespace(name="test_the_gpu_cases_narrow_to_the_selected_tests"),
    ]
    assert selected_gpu_cases(SimpleNamespace(items=items)) == {("chain_2d", True)}  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def gpu_judge(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[Any, Any]]:
    """Every unit the session's GPU tests judge, built once, and one evaluation worker for them all."""

    def units() -> list[KernelSource]:
        cases = gpu_cases(selected_gpu_cases(request.session))
        sources = [(conv_source(t, tf32, nhwc), combos) for t, combos, tf32, nhwc in cases]
        return [
            with_params(source, combo) for source, combos in sources for combo in declared(source, combos)
        ]

    yield from built_units_and_worker(tmp_path_factory, units, "conv-builds")


@pytest.mark.gpu
@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "3xtf32"])
@pytest.mark.parametrize("name", [*CONVS, "batchnorm_relu"])
def test_conv_units_are_correct_on_awkward_geometry(
    name: str, tf32: bool, gpu_judge: tuple[Any, Any]
) -> None:
    from kernelfoundry.evaluation import EvaluationRequest, EvaluationSettings
    from kernelfoundry.toolchains import BuildTarget, build

    t = suite_task(tf32) if name == "batchnorm_relu" else conv_task(name, tf32)
    cache, worker = gpu_judge
    settings = EvaluationSettings(
        measure_torch_compile=False, measure_baselines=False, timed_runs=10, warmup_runs=1
    )
    failures = []
    for nhwc in layouts(t):
        source = conv_source(t, tf32, nhwc)
        for combo in declared(source, gpu_combos(nhwc, tf32)):
            b = build(with_params(source, combo), BuildTarget("cuda", "sm90"), cache)  # a cache hit
            assert b.ok and b.artifact is not None, b.log
            request = EvaluationRequest(
                task=t,
                kernel=with_params(source, combo),
                artifact=b.artifact,
                device="cuda:0",
                settings=settings,
            )
            report = worker.evaluate(request)
            if not report.correct:
                failures.append(f"{combo}, channels-last {nhwc}: {report.reason} {report.message}")
    assert not failures, failures
