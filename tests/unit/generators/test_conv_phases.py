"""Output phases of a strided transposed conv (conv_phases.py, cuda_conv_phases.py): the baked tables,
replayed here in torch exactly as the CUDA unit reads them (pixel j of phase r reads input j + the tap's
offset, stores to r + S j), give torch's conv_transpose on every geometry; and the unit that uses them."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator, parse_variant
from kernelfoundry.generators.heuristic.conv_phases import phase_taps, phased
from kernelfoundry.generators.heuristic.cpu_conv import ConvPlan
from tests.fixtures.conv_tasks import conv_task

GEOMETRIES = {  # name: (kernel, stride, padding, dilation, output_padding, input (D, H, W))
    "3d_stride2": ((3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), (1, 1, 1), (3, 4, 5)),
    "2d_stride5_dilated": ((1, 3, 3), (1, 5, 5), (0, 1, 1), (1, 2, 2), (0, 0, 0), (1, 4, 6)),
    "2d_mixed": ((1, 3, 5), (1, 2, 3), (0, 1, 2), (1, 2, 1), (0, 1, 0), (1, 7, 9)),
    "1d_kernel_below_stride": ((1, 1, 2), (1, 1, 4), (0, 0, 0), (1, 1, 1), (0, 0, 3), (1, 1, 9)),
    "3d_asymmetric": ((3, 5, 7), (2, 2, 2), (1, 2, 3), (1, 1, 1), (0, 0, 0), (2, 3, 4)),
}


def plan_of(
    kernel: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...], dilation: tuple[int, ...]
) -> ConvPlan:
    """The geometry fields phase_taps reads (the rest of a plan is not consulted)."""
    return ConvPlan(
        conv=None,  # type: ignore[arg-type]
        x="x",
        weight="w",
        bias=None,
        step=None,
        channel_leaves=(),
        scalar_leaves=(),
        inputs=("x", "w"),
        dims=3,
        stride=stride,  # type: ignore[arg-type]
        padding=padding,  # type: ignore[arg-type]
        dilation=dilation,  # type: ignore[arg-type]
        kernel=kernel,  # type: ignore[arg-type]
        transposed=True,
    )


def replay(plan: ConvPlan, x: torch.Tensor, w: torch.Tensor, out_size: tuple[int, int, int]) -> torch.Tensor:
    """The phased conv as the unit computes it: per phase (rd, rh, rw) and each of its taps, the output
    pixels r + S j gain filter(tap) x input(j + offset) where that input exists."""
    nb, _, idims = x.shape[0], x.shape[1], x.shape[2:]
    out = torch.zeros(nb, w.shape[1], *out_size, dtype=x.dtype)
    taps = w.flatten(2)  # (CI, CO, taps)
    for phase, tab in zip(itertools.product(*(range(s) for s in plan.stride)), phase_taps(plan), strict=True):
        extents = [(o - r + s - 1) // s for o, r, s in zip(out_size, phase, plan.stride, strict=True)]
        for tap, *offsets in tab:
            # j ranges where j + offset lies in the input, per axis
            lo = [max(0, -off) for off in offsets]
            hi = [min(e, i - off) for e, i, off in zip(extents, idims, offsets, strict=True)]
            if any(h <= lo_ for lo_, h in zip(lo, hi, strict=True)):
                continue
            src = x[:, :, *(slice(a + off, b + off) for a, b, off in zip(lo, hi, offsets, strict=True))]
            contrib = torch.einsum("nc...,co->no...", src, taps[:, :, tap])
            dst = tuple(
                slice(r + s * a, r + s * (b - 1) + 1, s)
                for r, s, a, b in zip(phase, plan.stride, lo, hi, strict=True)
            )
            out[:, :, *dst] += contrib
    return out


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_the_phases_replayed_give_torchs_transposed_conv(name: str) -> None:
    kernel, stride, padding, dilation, extra, idims = GEOMETRIES[name]
    plan = plan_of(kernel, stride, padding, dilation)
    torch.manual_seed(0)
    x = torch.randn(2, 3, *idims, dtype=torch.float64)
    w = torch.randn(3, 4, *kernel, dtype=torch.float64)
    want = F.conv_transpose3d(x, w, stride=stride, padding=padding, output_padding=extra, dilation=dilation)
    got = replay(plan, x, w, tuple(want.shape[2:]))  # type: ignore[arg-type]
    torch.testing.assert_close(got, want)


def test_every_tap_reaches_exactly_the_phases_it_divides() -> None:
    plan = plan_of((3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1))
    tables = phase_taps(plan)
    assert len(tables) == 8
    assert sum(len(t) for t in tables) == 27  # each tap serves one phase per axis: none is repeated
    assert [len(t) for t in tables] == [1, 2, 2, 4, 2, 4, 4, 8]  # phase (0,0,0): the centre tap only
    # stride 5 over 3 taps of dilation 2: two of five phases a dimension are reached by no tap
    sparse = phase_taps(plan_of((1, 3, 3), (1, 5, 5), (0, 1, 1), (1, 2, 2)))
    assert sum(1 for t in sparse if not t) == 25 - 9


def test_a_strided_transposed_conv_is_phased_and_a_unit_stride_one_is_not() -> None:
    assert phased(plan_of((3, 3, 3), (1, 1, 2), (0, 0, 0), (1, 1, 1)))
    assert not phased(plan_of((3, 3, 3), (1, 1, 1), (0, 0, 0), (1, 1, 1)))
    task = conv_task("t", "nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1)", "2, 8, 5, 7")
    result = HeuristicGenerator().generate_sync(GenerationRequest("g", task, "cuda", count=16))
    units = [c.source.code for c in result.candidates if (v := parse_variant(c.source.code)) and v.gemm]
    assert units, result.message
    for code in units:
        assert "#define KF_PHASES 4" in code
        assert "__constant__ int4 kf_phase_tab[KF_PHASES][KF_PHASE_TAPS]" in code
        assert "% KF_SH == 0" not in code  # no tap is tested for divisibility: the phase has only its own
        assert "grid((unsigned)(ptiles * KF_PHASES)" in code
