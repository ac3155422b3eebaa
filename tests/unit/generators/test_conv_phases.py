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
from kernelfoundry.generators.heuristic.conv_phases import phase_counts, phase_taps, phased
from kernelfoundry.generators.heuristic.cpu_conv import ConvPlan
from kernelfoundry.generators.heuristic.cuda_conv_phases import phase_axes
from tests.fixtures.conv_tasks import conv_task

GEOMETRIES = {  # name: (kernel, stride, padding, dilation, output_padding, input (D, H, W))
    "3d_stride2": ((3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), (1, 1, 1), (3, 4, 5)),
    "2d_stride5_dilated": ((1, 3, 3), (1, 5, 5), (0, 1, 1), (1, 2, 2), (0, 0, 0), (1, 4, 6)),
    "2d_mixed": ((1, 3, 5), (1, 2, 3), (0, 1, 2), (1, 2, 1), (0, 1, 0), (1, 7, 9)),
    "1d_kernel_below_stride": ((1, 1, 2), (1, 1, 4), (0, 0, 0), (1, 1, 1), (0, 0, 3), (1, 1, 9)),
    "3d_asymmetric": ((3, 5, 7), (2, 2, 2), (1, 2, 3), (1, 1, 1), (0, 0, 0), (2, 3, 4)),
}


def plan_of(
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    in_channels: int = 8,
) -> ConvPlan:
    """The geometry fields the phase tables read (the rest of a plan is not consulted)."""
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
        in_channels=in_channels,
    )


def _pairs(
    size_out: int, size_in: int, stride: int, pad: int, on: bool, r: int, off: int
) -> list[tuple[int, int]]:
    """Along one axis, the (output, input) pairs phase r's tap of offset `off` joins, as the unit reads
    them: a phased axis, output r + S j from input j + off; one left unphased, output o from input
    (o + pad + off) / S where that divides."""
    if on:
        return [
            (r + stride * j, j + off)
            for j in range((size_out - r + stride - 1) // stride)
            if 0 <= j + off < size_in
        ]
    return [
        (o, (o + pad + off) // stride)
        for o in range(size_out)
        if (o + pad + off) >= 0 and (o + pad + off) % stride == 0 and (o + pad + off) // stride < size_in
    ]


def replay(
    plan: ConvPlan,
    x: torch.Tensor,
    w: torch.Tensor,
    out_size: tuple[int, int, int],
    axes: tuple[bool, bool, bool] = (True, True, True),
) -> torch.Tensor:
    """The phased conv as the unit computes it: per phase (rd, rh, rw) and each of its taps, the output
    pixels of the phase gain filter(tap) x the input the tap's offset reaches, where that input exists."""
    out = torch.zeros(x.shape[0], w.shape[1], *out_size, dtype=x.dtype)
    taps = w.flatten(2)  # (CI, CO, taps)
    phases = itertools.product(*(range(n) for n in phase_counts(plan, axes)))
    for phase, tab in zip(phases, phase_taps(plan, axes), strict=True):
        for tap, *offsets in tab:
            per_axis = [
                _pairs(o, i, s, p, on, r, off)
                for o, i, s, p, on, r, off in zip(
                    out_size, x.shape[2:], plan.stride, plan.padding, axes, phase, offsets, strict=True
                )
            ]
            if not all(per_axis):
                continue
            (od, idd), (oh, ih), (ow, iw) = (torch.tensor(pairs).T for pairs in per_axis)
            src = x[:, :, idd[:, None, None], ih[None, :, None], iw[None, None, :]]
            out[:, :, od[:, None, None], oh[None, :, None], ow[None, None, :]] += torch.einsum(
                "nc...,co->no...", src, taps[:, :, tap]
            )
    return out


@pytest.mark.parametrize("axes", [(True, True, True), (True, True, False)], ids=["every_axis", "w_unphased"])
@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_the_phases_replayed_give_torchs_transposed_conv(name: str, axes: tuple[bool, bool, bool]) -> None:
    kernel, stride, padding, dilation, extra, idims = GEOMETRIES[name]
    plan = plan_of(kernel, stride, padding, dilation)
    torch.manual_seed(0)
    x = torch.randn(2, 3, *idims, dtype=torch.float64)
    w = torch.randn(3, 4, *kernel, dtype=torch.float64)
    want = F.conv_transpose3d(x, w, stride=stride, padding=padding, output_padding=extra, dilation=dilation)
    got = replay(plan, x, w, tuple(want.shape[2:]), axes)  # type: ignore[arg-type]
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


def conv_family_units(module: str, shape: str) -> list[str]:
    """The CUDA conv family's units the proposer gives for `self.conv = {module}` over randn({shape})."""
    result = HeuristicGenerator().generate_sync(
        GenerationRequest("g", conv_task("t", module, shape), "cuda", count=16)
    )
    units = [c.source.code for c in result.candidates if (v := parse_variant(c.source.code)) and v.gemm]
    assert units, result.message
    return units


def test_a_strided_transposed_conv_is_phased_and_a_unit_stride_one_is_not() -> None:
    assert phased(plan_of((3, 3, 3), (1, 1, 2), (0, 0, 0), (1, 1, 1)))
    assert not phased(plan_of((3, 3, 3), (1, 1, 1), (0, 0, 0), (1, 1, 1)))
    for code in conv_family_units(
        "nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1)", "2, 8, 5, 7"
    ):
        assert "#define KF_PSH 2" in code and "#define KF_PSW 2" in code
        assert "#define KF_PHASES (KF_PSD * KF_PSH * KF_PSW)" in code
        assert "__constant__ int4 kf_phase_tab[KF_PHASES][KF_PHASE_TAPS]" in code
        assert "% KF_SH == 0" not in code  # no tap is tested for divisibility: the phase has only its own
        assert "grid((unsigned)(ptiles * KF_PHASES)" in code


def test_the_cuda_conv_leaves_w_unphased_where_a_w_phase_is_empty_and_the_stores_bind() -> None:
    # KernelBench's level-1 geometries (kernel, stride, padding, dilation; channels a group)
    full = plan_of((3, 5, 7), (2, 2, 2), (1, 2, 3), (1, 1, 1), in_channels=8)  # 72: no W phase empty
    assert phase_axes(full) == (True, True, True)
    dense = plan_of((3, 3, 3), (2, 2, 2), (1, 1, 1), (2, 2, 2), in_channels=32)  # 77: 108 FMAs an output
    assert phase_axes(dense) == (True, True, True)
    sparse = plan_of((1, 3, 3), (1, 5, 5), (0, 1, 1), (1, 2, 2), in_channels=32)  # 81: 11.5 an output
    assert phase_axes(sparse) == (True, True, False)
    one_d = plan_of((1, 1, 3), (1, 1, 2), (0, 0, 1), (1, 1, 2), in_channels=32)  # 79: W its only axis
    assert phase_axes(one_d) == (False, False, False)
    for code in conv_family_units(
        "nn.ConvTranspose2d(32, 6, 3, stride=5, padding=1, dilation=2)", "2, 32, 5, 7"
    ):
        assert "#define KF_PSH 5" in code and "#define KF_PSW 1" in code
        assert "w >= 0 && w % KF_SW == 0 && w / KF_SW < geo.IW" in code  # W's taps keep the test
