"""The CPU conv family's unit for a strided transposed conv (cpu_conv.py) is phased: it bakes
conv_phases' tables, gathers only each phase's taps (input j + a baked offset, no divisibility test),
packs each phase's filter rows and stores S apart; a stride-1 transposed conv and a forward conv keep the
im2col path over every tap."""

from __future__ import annotations

from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.generators.heuristic.conv_phases import phase_taps
from kernelfoundry.generators.heuristic.cpu_conv import conv_plan
from kernelfoundry.generators.heuristic.graph import capture
from tests.fixtures.conv_tasks import conv_task


def unit_of(module: str, shape: str, body: str = "self.conv(x)") -> str:
    """The CPU conv family's implicit-GEMM unit of a one-conv task."""
    task = conv_task("t", module, shape, body)
    result = HeuristicGenerator().generate_sync(GenerationRequest("g", task, "cpu", count=4))
    seeds = [c.source.code for c in result.candidates if "implicit GEMM" in c.rationale]
    assert seeds, result.message
    return seeds[0]


def test_a_strided_transposed_conv_bakes_the_phase_tables_and_gathers_without_divisibility() -> None:
    module = "nn.ConvTranspose3d(4, 8, 3, stride=2, padding=1, output_padding=1, groups=2)"
    code = unit_of(module, "1, 4, 3, 4, 5", "torch.sigmoid(self.conv(x))")
    assert "enum { KF_PHASES = 8, KF_PHASE_TAPS = 8 };" in code
    assert "kf_phase_count[KF_PHASES] = {1, 2, 2, 4, 2, 4, 4, 8};" in code
    assert "kf_phase_start[KF_PHASES] = {0, 1, 3, 5, 9, 11, 15, 19};" in code
    assert "static const int64_t kf_phase_tab[27][4] = {" in code  # every tap once
    assert "if (KD != 3 || KH != 3 || KW != 3) return KF_ERR_BAD_ARGUMENTS;" in code
    gather = code[code.index("const int64_t* tap = tab[k % T];") : code.index("kf_conv_tile(wr, kk")]
    assert "% 2" not in gather and "/ 2" not in gather  # no divisibility test, no division by the stride
    assert "prow[j] = j < nw && c >= 0 && c < IW ? xr[c] : 0.0f;" in gather
    assert "const int64_t rd = od % 2, rh = oh % 2, jd = od / 2, jh = oh / 2;" in code
    assert "rw + 2 * jw0;" in code and "orow[2 * j] = " in code  # stores S apart
    assert "ktap" not in code  # the all-tap table of the im2col path is gone


def test_the_tables_are_conv_phases_own() -> None:
    task = conv_task("t", "nn.ConvTranspose2d(3, 10, 3, stride=5, padding=1, dilation=2)", "2, 3, 4, 6")
    plan = conv_plan(capture(task))
    assert plan is not None
    phases = phase_taps(plan)
    assert sum(1 for taps in phases if not taps) == 16  # bias and tail only there
    code = unit_of("nn.ConvTranspose2d(3, 10, 3, stride=5, padding=1, dilation=2)", "2, 3, 4, 6")
    counts = ", ".join(str(len(taps)) for taps in phases)
    assert f"kf_phase_count[KF_PHASES] = {{{counts}}};" in code
    rows = [f"    {{{', '.join(map(str, tap))}}}," for taps in phases for tap in taps]
    table = code[code.index("kf_phase_tab[9][4] = {") :].splitlines()[1:10]
    assert table == rows


def test_a_stride_one_transposed_conv_and_a_forward_conv_keep_the_im2col_path() -> None:
    for module, shape in (
        ("nn.ConvTranspose2d(4, 6, 3, padding=1, dilation=2, groups=2)", "2, 4, 7, 9"),
        ("nn.Conv3d(4, 8, 3, stride=2, padding=1)", "1, 4, 6, 7, 8"),
    ):
        code = unit_of(module, shape)
        assert "kf_phase_tab" not in code and "ktap[4 * k + 3]" in code
