"""The CUDA implicit-GEMM conv family (cuda_conv.py): where it applies, what its unit declares, gathers
and launches, how the proposer orders and reaches it. Pure strings: nothing is compiled or run here."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelfoundry.generators.base import GeneratedCandidate, GenerationRequest, ParentKernel
from kernelfoundry.generators.heuristic import HeuristicGenerator, capture, parse_variant
from kernelfoundry.generators.heuristic.cuda_conv import cuda_conv_applies
from kernelfoundry.tasks.model import ShapeVariant, Task
from tests.fixtures.conv_tasks import conv_task as fixture_conv_task

TASKS = Path(__file__).resolve().parents[3] / "tasks"


def conv_task(module: str, shape: str, body: str = "self.conv(x)") -> Task:
    return fixture_conv_task("conv", module, shape, body)


def seeds(t: Task) -> list[GeneratedCandidate]:
    result = HeuristicGenerator().generate_sync(GenerationRequest("g", t, "cuda", count=16))
    assert not result.error, result.message
    return list(result.candidates)


def family(t: Task, channels_last: bool = False) -> list[GeneratedCandidate]:
    """The conv family's seeds: those reading the input in NCHW, or through its NHWC copy."""
    return [
        c
        for c in seeds(t)
        if (v := parse_variant(c.source.code)) is not None and v.gemm and v.channels_last == channels_last
    ]


def test_a_bare_conv_leads_with_one_tf32_product_then_3xtf32() -> None:
    found = seeds(conv_task("nn.Conv2d(3, 5, 3, stride=2, padding=1, dilation=2)", "2, 3, 13, 11"))
    first, second = (parse_variant(c.source.code) for c in found[:2])
    assert first is not None and first.gemm and first.tensor_cores and first.tf32
    assert second is not None and second.gemm and second.tensor_cores and not second.tf32
    assert "#define KF_TF32_TERMS 1" in found[0].source.code
    assert "#define KF_TF32_TERMS 3" in found[1].source.code
    for c in found[:2]:
        assert not c.source.glue and c.source.entry_point == "kf_forward"  # no cuDNN behind it
        assert (c.strategy.memory, c.strategy.parallelism) == (3, 2)


def test_the_geometry_is_baked_and_the_gather_reads_zeros_in_the_padding() -> None:
    code = family(
        conv_task("nn.Conv3d(3, 8, (3, 5, 7), stride=(1, 2, 3), padding=(1, 2, 0))", "2, 3, 5, 9, 11")
    )[0].source.code
    for define in ("KF_KD 3", "KF_KH 5", "KF_KW 7", "KF_SH 2", "KF_SW 3", "KF_PD 1", "KF_PH 2", "KF_PW 0"):
        assert f"#define {define}" in code
    # one (ci, tap) decode a k row for the thread's four pixels; a tap in the padding reads 0
    assert "const int ci = gk / KF_TAPS, t = gk - ci * KF_TAPS;" in code
    assert "const bool ok = gk < K && qin[u] && d >= 0 && d < geo.ID && h >= 0 && h < geo.IH" in code
    # straight into the stage (zeros where not ok); a warp's 32 copies of a k row are neighbouring pixels
    assert "kf_cp4(&Bs[st][kk][lane + 32 * u], ok ? src + (d * geo.IH + h) * geo.IW + w : W, ok);" in code
    assert "const int px = n0 + lane + 32 * u;" in code
    # K = 3 x 105 taps: no 16-byte filter copies
    assert "const int a_vec = K % 4 == 0 && ((uintptr_t)Wt) % 16 == 0;" in code
    assert "(unsigned)(NB * KF_GROUPS)" in code  # the grid's z is (image, group)
    # the output size follows torch's formula, and a filter larger than the padded input is refused
    assert "const int64_t OW = RW < 0 ? 0 : RW / KF_SW + 1;" in code
    assert "if (OD <= 0 || OH <= 0 || OW <= 0) return KF_ERR_BAD_ARGUMENTS;" in code
    # channels are few (8): 32 rows a block by default, warps 64 pixels wide
    assert "// @kf.tunable BM in [32, 64, 128] default 32" in code
    assert "// @kf.tunable KF_WN in [4, 8] default 8" in code


def test_the_tail_reads_its_per_channel_operands_by_the_output_row() -> None:
    t = Task(
        "level2_conv_batchnorm_relu",
        (TASKS / "level2_conv_batchnorm_relu.py").read_text(),
        shapes=(ShapeVariant("small", {"batch_size": 1, "height": 8, "width": 8}),),
    )
    found = seeds(t)
    assert not parse_variant(found[0].source.code).gemm  # cuDNN's conv and the fused tail lead
    (_, full) = family(t)
    code = full.source.code
    assert "const float cb = bias ? bias[cbase + rc] : 0.0f;" in code  # cbase: the group's first
    assert (
        "geo.C0[cbase + rc]" in code and "geo.C3[cbase + rc]" in code
    )  # the BatchNorm statistics and affine
    assert "(int)OD, (int)OH, (int)OW, C0, C1, C2, C3};" in code  # the kernel's argument carries them
    assert "// @kf.tunable BM in [32, 64, 128] default 64" in code  # 64 output channels


@pytest.mark.parametrize(
    ("module", "shape"),
    [
        ("nn.Conv2d(4, 8, 3, padding='same')", "1, 4, 9, 9"),
        ("nn.Conv2d(4, 4, 3, groups=4)", "1, 4, 9, 9"),  # depthwise: the op kernels' own kernel
        ("nn.Conv2d(4, 8, 3, padding_mode='reflect', padding=1)", "1, 4, 9, 9"),
    ],
)
def test_refuses_what_it_does_not_compute(module: str, shape: str) -> None:
    t = conv_task(module, shape)
    assert not cuda_conv_applies(capture(t))
    # ('same' and reflect padding get no candidate at all yet: the op kernels refuse them too)
    # a depthwise conv keeps its specialised op kernel (a GEMM of one input channel a group wastes it)
    found = HeuristicGenerator().generate_sync(GenerationRequest("g", t, "cuda", count=16)).candidates
    assert not any((v := parse_variant(c.source.code)) is not None and v.gemm for c in found)


def test_fusion_of_a_fused_conv_parent_moves_the_conv_into_the_family() -> None:
    t = Task(
        "level2_conv_bias_relu",
        (TASKS / "level2_conv_bias_relu.py").read_text(),
        shapes=(ShapeVariant("small", {"batch_size": 1, "height": 8, "width": 8}),),
    )
    fused = seeds(t)[0]
    assert not parse_variant(fused.source.code).gemm
    p = ParentKernel(fused.source, fused.strategy, speedup=1.0, runtime_ms=1.0)
    req = GenerationRequest("m", t, "cuda", parent=p, mutation="fusion", seed=0)
    moved = HeuristicGenerator().generate_sync(req).candidates[0]
    variant = parse_variant(moved.source.code)
    assert variant is not None and variant.gemm and variant.tensor_cores
    assert "kf_conv_args" in moved.source.code and not moved.source.glue


def test_groups_and_transposes_read_their_own_filter_layout() -> None:
    grouped = family(conv_task("nn.Conv2d(6, 9, 3, groups=3)", "1, 6, 9, 9"))[0].source.code
    assert "#define KF_GROUPS 3" in grouped
    assert "#define KF_A_SRC(gm, gk) (X + (int64_t)(gm) * K + (gk))" in grouped  # (CO, CI / G, taps)
    assert "if (sw.d[1] * KF_GROUPS != CI || CO % KF_GROUPS != 0" in grouped
    assert "const dim3 grid((unsigned)ptiles, (unsigned)ctiles, (unsigned)(NB * KF_GROUPS));" in grouped
    module = "nn.ConvTranspose3d(4, 8, 3, stride=2, padding=1, output_padding=1, groups=2)"
    transposed = family(conv_task(module, "1, 4, 4, 5, 6"))[0].source.code
    assert "#define KF_GROUPS 2" in transposed
    # (CI, CO / G, taps): k = (ci, the phase's tap) strides over every output channel's filters
    assert "(X + ((int64_t)((gk) / taps) * M + (gm)) * KF_TAPS + kf_tab[(gk) % taps].x)" in transposed
    assert "const int64_t OW = (IW - 1) * KF_SW - 2 * KF_PW + KF_DW * (KF_KW - 1) + 1 + 1;" in transposed
    assert "const int a_vec = 0;" in transposed  # its filter rows are not k-contiguous: 4-byte copies
    # stride 1: one phase, every tap; its input position tested as any transposed conv's
    module = "nn.ConvTranspose3d(4, 8, 3, padding=1, groups=2)"
    unit_stride = family(conv_task(module, "1, 4, 4, 5, 6"))[0].source.code
    assert "(X + ((int64_t)((gk) / KF_TAPS) * M + (gm)) * KF_TAPS + (gk) % KF_TAPS)" in unit_stride
    assert "d % KF_SD == 0" in unit_stride and "KF_PHASES" not in unit_stride


def test_k_streams_through_a_cp_async_pipeline_of_declared_depth() -> None:
    source = family(conv_task("nn.Conv2d(16, 32, 3)", "1, 16, 12, 12"))[0].source
    declared = {t.name: (t.values, t.default) for t in source.tunables}
    assert declared["KF_STAGES"] == ((2, 3, 4), 3) and declared["BK"] == ((8, 16, 32), 16)
    code = source.code
    # KF_STAGES - 1 slices in flight before the loop; each iteration waits for its own, then a barrier
    assert "for (int s = 0; s < KF_STAGES - 1; ++s) {" in code
    wait = code.index('asm volatile("cp.async.wait_group %0;" ::"n"(KF_STAGES - 2));')
    barrier, refill = code.index("__syncthreads();", wait), code.index("load_b(next % KF_STAGES", wait)
    mma = code.index("kf_mma(c0, c1, c2, c3, ah, bh[t][0], bh[t][1]);", wait)
    assert wait < barrier < refill < mma  # the stage refilled is the one the last iteration read
    # shared memory past 48 KB (BK 32, 4 stages) is asked for before the launch
    assert "cudaFuncSetAttribute(kf_conv, most, (int)smem)" in code
    assert "kf_conv<<<grid, 256, smem, st>>>" in code
    # K = 16 x 9 = 144: the filters' rows are k-contiguous and 16-byte aligned where the weight is
    assert "const int a_vec = K % 4 == 0 && ((uintptr_t)Wt) % 16 == 0;" in code
    assert "kf_cp16(KF_A_AT(st, r, kk), ok ? KF_A_SRC(gm, gk) : X, ok);" in code
    assert "#define KF_A_AT(st, r, k) (&As[st][r][k])" in code  # the mma.sync stages: row-major


def test_a_bare_conv_of_channels_in_runs_of_four_leads_with_the_channels_last_path() -> None:
    found = seeds(conv_task("nn.Conv2d(8, 16, 3, padding=1)", "2, 8, 13, 11"))
    order = [(v.tf32, v.channels_last) for c in found[:4] if (v := parse_variant(c.source.code)) and v.gemm]
    # each precision through the NHWC copy first (3xTF32 second: where cuDNN runs float32, only it
    # passes), then the NCHW gather at each
    assert order == [(True, True), (False, True), (True, False), (False, False)]
    assert "#define KF_NHWC 1" in found[0].source.code and "#define KF_NHWC 0" in found[2].source.code
    # three input channels: no 16-byte runs, the NCHW gather only
    plain = seeds(conv_task("nn.Conv2d(3, 5, 3)", "2, 3, 13, 11"))
    variants = [parse_variant(c.source.code) for c in plain]
    assert not any(v is not None and v.channels_last for v in variants)


def test_the_channels_last_path_copies_16_byte_runs_of_one_tap() -> None:
    code = family(conv_task("nn.Conv2d(12, 16, (3, 5), stride=2, padding=1)", "1, 12, 9, 11"), True)[
        0
    ].source.code
    assert "#define KF_CIG 12" in code
    assert "if (CI != (int64_t)KF_CIG * KF_GROUPS) return KF_ERR_BAD_ARGUMENTS;" in code
    # K ordered (tap, channel): one decode a run of four channels, one bounds check a pixel
    assert "const int t = gk / KF_CIG, ci = gk - t * KF_CIG;" in code
    # a tap's input offset is the pixel's plus the tap's (a forward conv's taps are linear)
    assert "qoff[u] = (qd[u] * geo.IH + qh[u]) * geo.IW + qw[u];" in code
    assert "const int toff = (td * geo.IH + th) * geo.IW + tw;" in code
    assert "ok ? W + (int64_t)(qoff[u] + toff) * geo.CI + ci : W, ok);" in code
    assert "kf_cp16_l1(KF_B_AT(st, prow + KF_PIXEL_STEP * u, run)," in code
    assert "#define KF_B_AT(st, p, k) (&Bs[st][p][k])" in code
    # the stages are pixel-major (k-contiguous), and so are the fragment reads
    assert "#define KF_B_FRAG(k, c) Bs[cur][c][k]" in code
    # the input's NHWC copy and the filters' (CO, taps, channel) copy, in scratch freed after the conv
    assert "kf_to_nhwc<<<tgrid, dim3(32, 8), 0, st>>>(X, xin, (int)CI, S);" in code
    assert "f[e] = KF_STAGED(w[((g * M + m) * KF_CIG + ci) * KF_TAPS + t]);" in code
    assert "const int a_vec = 1;" in code
    assert "cudaFreeAsync(xin, st);" in code and "cudaFreeAsync(fil, st);" in code


def test_only_the_channels_last_one_product_unit_reads_its_fragments_16_bytes_wide() -> None:
    t = conv_task("nn.Conv2d(8, 16, 3, padding=1)", "2, 8, 13, 11")
    wide = "// @kf.tunable KF_WIDE_FRAGS in [0, 1] default 0"
    for c in seeds(t):
        v = parse_variant(c.source.code)
        if v is None or not v.gemm:
            continue
        assert (wide in c.source.code) == (v.channels_last and v.tf32), v
        # ldmatrix reads wherever both stage tiles are k-contiguous: every channels-last unit, by default
        ldsm = "// @kf.tunable KF_LDSM in [0, 1] default 1"
        assert (ldsm in c.source.code) == v.channels_last, v
        assert "#define KF_FRAG_LDSM (KF_LDSM && KF_NHWC && !KF_FRAG16)" in c.source.code
        # where the tunable is absent the width follows from the unit (NCHW or 3xTF32: 4 bytes)
        assert "#define KF_FRAG16 (KF_WIDE_FRAGS && KF_NHWC && KF_TF32_TERMS == 1 && BK % 16 == 0)" in (
            c.source.code
        )


def test_a_transposed_conv_through_channels_last_reads_its_filters_by_input_channel() -> None:
    module = "nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1, groups=2)"
    code = family(conv_task(module, "1, 8, 5, 7"), True)[0].source.code
    assert "#define KF_CIG 4" in code and "#define KF_GROUPS 2" in code
    assert "f[e] = KF_STAGED(w[((g * KF_CIG + ci) * M + m) * KF_TAPS + t]);" in code  # (CI, CO / G, taps)
    # phased: a k run of 4 channels at the phase's tap, read at the filter's own tap of its rewritten row
    assert "const int4 tap = kf_tab[t < taps ? t : 0];" in code
    assert (
        "(X + (int64_t)(gm) * (KF_TAPS * KF_CIG) + kf_tab[(gk) / KF_CIG].x * KF_CIG + (gk) % KF_CIG)" in code
    )


NCHW_FIRST = [(True, False), (False, False), (True, True), (False, True)]
CHANNELS_LAST_FIRST = [(True, True), (False, True), (True, False), (False, False)]


@pytest.mark.parametrize(
    ("module", "shape", "order"),
    [
        # a 1x1 conv of stride 1 reads each k row's pixels contiguously in NCHW; the NHWC copy would only
        # add the input's bytes twice to a memory-bound conv: its channels-last seeds come after
        ("nn.Conv2d(8, 16, 1)", "2, 8, 13, 11", NCHW_FIRST),
        # a 1-D conv whose input holds more values than its output (level1/76's shape, shorter): the
        # copy would cost more than the conv's own reads and writes
        ("nn.Conv1d(64, 128, 3, stride=3, dilation=4, bias=False)", "2, 64, 4000", NCHW_FIRST),
        # the same conv at stride 1 (its output the larger) reads the input span by default (forward,
        # odd taps: level1/67's kind), which beat the channels-last seed there: NCL leads
        ("nn.Conv1d(64, 128, 3, dilation=4, bias=False)", "2, 64, 4000", NCHW_FIRST),
        # at an even number of taps the span is off at 128 channels, and on a 2-D strided conv there is
        # none: channels-last leads
        ("nn.Conv1d(64, 128, 4, dilation=4, bias=False)", "2, 64, 4000", CHANNELS_LAST_FIRST),
        ("nn.Conv2d(64, 16, 3, stride=2)", "2, 64, 21, 21", CHANNELS_LAST_FIRST),
    ],
)
def test_the_nchw_seeds_lead_where_the_channels_last_copy_costs_more_than_it_saves(
    module: str, shape: str, order: list[tuple[bool, bool]]
) -> None:
    found = seeds(conv_task(module, shape))
    got = [(v.tf32, v.channels_last) for c in found[:4] if (v := parse_variant(c.source.code)) and v.gemm]
    assert got == order


def test_the_channels_last_tf32_conv_of_128_rows_takes_two_blocks_of_128_by_128_tiles() -> None:
    """At BM 128 (a group of 128 output channels or more) the channels-last one-TF32-product unit defaults
    to warps 32 pixels wide and two blocks an SM (cuDNN's 128 x 128 tiles); NCHW and 3xTF32 units, and
    narrower BM, keep warps 64 pixels wide."""
    t = conv_task("nn.Conv2d(16, 128, 3, padding=1)", "2, 16, 13, 11")
    checked = 0
    for c in seeds(t):
        v = parse_variant(c.source.code)
        if v is None or not v.gemm:
            continue
        code = c.source.code
        assert "// @kf.tunable BM in [32, 64, 128] default 128" in code
        narrow = v.channels_last and v.tf32
        assert f"// @kf.tunable KF_WN in [4, 8] default {4 if narrow else 8}" in code, v
        assert f"// @kf.tunable KF_MIN_BLOCKS in [1, 2] default {2 if narrow else 1}" in code, v
        checked += narrow
    assert checked, "no channels-last TF32 unit among the seeds"


@pytest.mark.parametrize(
    ("module", "shape", "on"),
    [
        # K = 64 x 35 = 2240 a group, 128 output channels: level1/56's geometry, small
        ("nn.Conv2d(64, 128, (5, 7))", "1, 64, 12, 14", True),
        # a transposed conv of stride 1: K = 64 x 9 = 576, 64 channels (level1/57)
        ("nn.ConvTranspose2d(64, 64, 3)", "1, 64, 9, 9", True),
        # short K: 64 x 3 = 192 (level1/67)
        ("nn.Conv1d(64, 128, 3)", "1, 64, 40", False),
        # 32 output channels: half of each 64-row slab would be padding (level1/78)
        ("nn.ConvTranspose2d(32, 32, (3, 7), padding=(1, 3))", "1, 32, 9, 15", False),
        # stride 2 spreads a transposed conv's 9 taps over 4 phases: K = 64 x 2 = 128 a phase
        ("nn.ConvTranspose2d(64, 64, 3, stride=2)", "1, 64, 9, 9", False),
    ],
)
def test_the_channels_last_tf32_unit_multiplies_by_warpgroups_where_k_is_long(
    module: str, shape: str, on: bool
) -> None:
    """KF_WGMMA (cuda_conv_wgmma.py) is declared on every channels-last one-TF32-product unit, on by
    default where a group's K is at least 512 with 64 or more output channels (then with four stages),
    and absent from 3xTF32 and NCHW units; the unit holds both kernels, the preprocessor picks one."""
    found = [
        (c.source, v)
        for c in seeds(conv_task(module, shape))
        if (v := parse_variant(c.source.code)) and v.gemm
    ]
    checked = 0
    for source, v in found:
        declared = {t.name: (t.values, t.default) for t in source.tunables}
        if not (v.channels_last and v.tf32):
            assert "KF_WGMMA" not in declared and "wgmma" not in source.code, v
            continue
        checked += 1
        assert declared["KF_WGMMA"] == ((0, 1), int(on))
        assert declared["KF_WG_BN"] == ((128, 256), 256)
        assert declared["KF_STAGES"] == ((2, 3, 4), 4 if on else 3)
        code = source.code
        assert code.index("#if KF_WGMMA") < code.index("#else  /* mma.sync */") < code.index("kf_forward")
        assert "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32" in code
        assert "#define KF_A_AT(st, r, k) (kf_stages + (st) * KF_STAGE_FLOATS + KF_SWZ(r, k))" in code
        # one group of MMAs in flight; the gathers into the stage the group before last read
        loop = code[code.index('asm volatile("cp.async.wait_group %0;" ::"n"(KF_WG_STAGES - 3));') :]
        fence, barrier = loop.index("kf_async_fence();"), loop.index("__syncthreads();")
        refill, mma = loop.index("load_b(next % KF_WG_STAGES"), loop.index("kf_wgmma(acc,")
        assert fence < barrier < refill < mma < loop.index("kf_wg_wait<1>();")
    assert checked == 1, found


@pytest.mark.parametrize(
    ("module", "shape", "strip", "on"),
    [
        # level1/62's geometry on shorter rows: 32 channels, 5 x 9 taps, 64 out, rows of 200 (78% of a tile)
        ("nn.Conv2d(32, 64, (5, 9))", "1, 32, 8, 208", True, True),
        # level1/67's: K 192 (the warpgroup MMAs come with the strip), rows of 998 pixels (four tiles, 97%)
        ("nn.Conv1d(64, 128, 3)", "1, 64, 1000", True, True),
        # a transposed conv of stride 1 whose rows of 132 pixels one tile fills half (level1/69's case)
        ("nn.ConvTranspose2d(64, 128, (3, 5))", "1, 64, 4, 128", True, False),
        # 32 output channels (level1/78's geometry): half of each 64-row slab is padding, and still faster
        ("nn.Conv2d(32, 32, (3, 7))", "1, 32, 5, 262", True, True),
        # 16 output channels: three quarters would be padding
        ("nn.Conv2d(32, 16, (3, 7))", "1, 32, 5, 262", True, False),
        # stride 2 along the row: neighbouring pixels read every other input pixel, no strip
        ("nn.Conv2d(32, 64, 3, stride=(1, 2))", "1, 32, 6, 520", False, False),
        # a strided transposed conv is phased: no strip
        ("nn.ConvTranspose2d(64, 64, 3, stride=2)", "1, 64, 9, 130", False, False),
    ],
)
def test_the_warpgroup_conv_reads_a_row_strip_where_its_tiles_fill_the_rows(
    module: str, shape: str, strip: bool, on: bool
) -> None:
    """KF_WG_STRIP (cuda_conv_strip.py) is declared where consecutive output pixels read consecutive
    input pixels at every tap (stride 1 along the row; transposed, stride 1) with 2+ taps along it; on by
    default (with the warpgroup MMAs) where 256-pixel tiles fill 60% of an output row at 32+ channels."""
    units = [
        c.source
        for c in seeds(conv_task(module, shape))
        if (v := parse_variant(c.source.code)) and v.gemm and v.channels_last and v.tf32
    ]
    assert len(units) == 1
    declared = {t.name: (t.values, t.default) for t in units[0].tunables}
    code = units[0].code
    if not strip:
        assert "KF_WG_STRIP" not in declared and "load_slice" not in code
        return
    assert declared["KF_WG_STRIP"] == ((0, 1), int(on))
    if on:
        assert declared["KF_WGMMA"] == ((0, 1), 1)
    assert (
        code.index("#if KF_STRIP") < code.index("#else  /* gathers */") < code.index("#else  /* mma.sync */")
    )
    # the tap's B descriptor starts its rows into the strip; the next slice's copies follow the MMAs
    shift = "(KF_KW - 1 - kw)" if "Transpose" in module else "kw"
    assert f"b = b_at + stage + {shift} * KF_DW * 128;" in code
    loop = code[code.index("for (int t = 0; t < slices; ++t)") :]
    assert loop.index("kf_wg_commit();") < loop.index("load_slice(next % KF_SS, next);")
    assert loop.index("load_slice(next % KF_SS, next);") < loop.index("kf_wg_wait<0>();")


@pytest.mark.parametrize(
    ("module", "shape", "span"),
    [
        ("nn.Conv1d(64, 128, 3, stride=3, dilation=4, bias=False)", "2, 64, 4000", True),  # level1/76's
        ("nn.Conv1d(12, 20, 5, stride=2, padding=3, dilation=2, groups=2)", "2, 12, 400", True),
        ("nn.ConvTranspose1d(16, 8, 3, padding=1, dilation=3)", "2, 16, 64", True),
        # a strided transposed conv is phased; a 2-D conv's pixels read no one span
        ("nn.ConvTranspose1d(16, 8, 3, stride=2)", "2, 16, 64", False),
        ("nn.Conv2d(16, 8, 3)", "2, 16, 20, 20", False),
        # pointwise convs of any dimension read their flattened planes as 1-D (level1/87's shape)...
        ("nn.Conv2d(64, 128, 1, bias=False)", "2, 64, 32, 32", True),
        ("nn.Conv3d(10, 12, 1, groups=2)", "2, 10, 3, 5, 7", True),
        ("nn.ConvTranspose2d(16, 8, 1)", "2, 16, 9, 9", True),
        # ...but not strided or padded ones (their pixels skip or pass the input's)
        ("nn.Conv2d(16, 8, 1, stride=2)", "2, 16, 20, 20", False),
        ("nn.Conv2d(16, 8, 1, padding=1)", "2, 16, 20, 20", False),
    ],
)
def test_a_1d_or_pointwise_conv_read_in_ncl_copies_one_input_span_a_channel(
    module: str, shape: str, span: bool
) -> None:
    """KF_SPAN (cuda_conv_span.py) is declared in the NCL / NCHW unit of a conv whose pixels read one span
    of each channel: a 1-D conv, forward or transposed of stride 1, or a pointwise conv of any dimension
    (its planes flattened); on by default where a block holds at most 64 output channels, off at 128
    (two blocks an SM of 128 x 128 tiles either way, but one block of 128 x 256 for a pointwise conv's
    gather of plane runs, as measured). Its B fragments are read from the span at the
    pixel's stride and the tap's dilation; the span is copied 16 bytes at a time where the input's planes
    are 16-byte aligned (`a_vec` in span mode)."""
    (unit,) = [c.source for c in family(conv_task(module, shape)) if parse_variant(c.source.code).tf32]
    declared = {t.name: (t.values, t.default) for t in unit.tunables}
    if not span:
        assert "KF_SPAN" not in declared and "load_b = [&](int st, int s)" not in unit.code
        return
    wide = declared["BM"][1] == 128
    # on by default up to 64 channels a block, and at 128 for forward 1-D convs of odd taps (more than one)
    odd_taps_1d = "Conv1d(" in module and module.split(", ")[2] in {"3", "5", "7"}
    assert declared["KF_SPAN"] == ((0, 1), 0 if wide and not odd_taps_1d else 1)
    pointwise_gather = module.split(", ")[2].rstrip(")") == "1" and declared["KF_SPAN"][1] == 0
    if wide:  # two blocks an SM of 128 x 128 tiles, span or gather; one of 128 x 256 (as measured)
        tile = (8, 1) if pointwise_gather else (4, 2)
        assert (declared["KF_WN"][1], declared["KF_MIN_BLOCKS"][1]) == tile
    code = unit.code
    assert code.index("#if KF_SPAN") < code.index("#else  /* gathers */")
    b_frag = "Bs[cur][(k) % KF_SPAN_CH][(c) * KF_SW + (k) / KF_SPAN_CH * KF_DW + shift]"
    assert f"#define KF_B_FRAG(k, c) {b_frag}" in code
    assert declared["KF_SPAN_CH"] == ((8, 16), 8)  # a stage's channels: 8 as measured, 16 swept
    assert "for (int k8 = 0; k8 < KF_SK; k8 += 8)" in code
    assert "const int a_vec = ((ID * IH * IW) % 4 == 0 && ((uintptr_t)X) % 16 == 0)" in code
    assert "const int plane = geo.ID * geo.IH * geo.IW;" in code
    if "Transpose" in module:  # the taps reversed: the filters of tap KW - 1 - tap, the span from the last
        assert "(KF_KW - 1 - tap)" in code and "n0 + KF_PW - (KF_KW - 1) * KF_DW" in code
        assert "#define KF_A_FRAG(k, r) As[cur][r][k]" in code and "| (0) << 1;" in code
    else:  # forward, odd taps: (channel, tap) filter rows, 16 bytes a copy where K % 4 == 0 and aligned
        assert "#define KF_A_FRAG(k, r) As[cur][r][(k) % KF_SPAN_CH * KF_KW + (k) / KF_SPAN_CH]" in code
        assert "| (K % 4 == 0 && ((uintptr_t)Wt) % 16 == 0) << 1;" in code
        assert "kf_cp16(&As[st][r][kk], ok ? X + (int64_t)gm * K + k0 + kk : X, ok);" in code


@pytest.mark.parametrize("taps", [1, 3, 5, 7, 9, 11])
def test_the_spans_channel_major_filter_rows_keep_a_k8_steps_fragment_reads_in_distinct_banks(
    taps: int,
) -> None:
    """A forward conv's stage rows of (channel, tap), KF_AS_LD = KF_SPAN_CH x taps + 4 floats apart: a
    warp's A fragment reads of one tap (rows g < 8, channels tig and tig + 4 of the step's 8) hit 32
    distinct banks for an odd number of taps, the only ones filters_by_channel gives them."""
    for depth in (8, 16):  # KF_SPAN_CH; a k8 step of a 16-deep stage reads channels 0-7 or 8-15
        ld = depth * taps + 4
        for tap in range(taps):
            for first in range(0, depth, 8):
                for half in (0, 4):
                    banks = {
                        (g * ld + (first + tig + half) * taps + tap) % 32
                        for g in range(8)
                        for tig in range(4)
                    }
                    assert len(banks) == 32


@pytest.mark.parametrize("stride", [1, 2, 3, 4, 5, 6, 7, 8])
def test_the_span_rows_keep_a_k8_steps_fragment_reads_in_distinct_banks(stride: int) -> None:
    """The spans' padded row length: 16-byte aligned (a multiple of 4 floats), and a warp's B fragment
    reads (4 channels x 8 pixels at the stride) in 32 distinct banks where the stride is odd. With rows
    a multiple of 4 apart, an even stride reaches only the banks of its gcd with 4: as few reads share
    one as that allows."""
    import math

    from kernelfoundry.generators.heuristic.cuda_conv_span import span_bank_residue

    residue = span_bank_residue(stride)
    assert residue % 4 == 0
    banks = [0] * 32
    for tig in range(4):
        for g in range(8):
            banks[(tig * residue + g * stride) % 32] += 1
    worst = max(banks)
    assert worst == math.gcd(stride, 4)
