"""The proposer's strategies land in different MAP-Elites cells, and its self-report agrees with the archive's
classifier (kernelfoundry.domain.descriptors.classify) for every seed and mutation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelfoundry.domain.descriptors import classify
from kernelfoundry.generators.base import MUTATIONS, GeneratedCandidate, GenerationRequest, ParentKernel
from kernelfoundry.generators.heuristic import HeuristicGenerator, parse_variant
from kernelfoundry.tasks.analysis import reference_op_count
from kernelfoundry.tasks.model import ShapeVariant, Task

TASKS = Path(__file__).resolve().parents[3] / "tasks"
SMALL = {
    "level2_elementwise_chain": {"batch_size": 4, "dim": 16},
    "level2_matmul_softmax": {"batch_size": 4, "in_features": 8, "out_features": 16},
    "level2_gemm_sigmoid_sum": {"batch_size": 4, "in_features": 8, "out_features": 16},
    "level2_gemm_log_softmax": {"batch_size": 4, "in_features": 8, "num_classes": 16},
    "level2_gemm_scale_gelu": {"batch_size": 4, "in_features": 8, "out_features": 16},
    "level2_conv_batchnorm_relu": {"batch_size": 1, "height": 8, "width": 8},
    "level1_rms_norm": {"batch_size": 2, "features": 4, "dim1": 4, "dim2": 4},
    "level1_sum_reduction": {"batch_size": 2, "dim1": 8, "dim2": 8},
}


def task(name: str) -> Task:
    return Task(name, (TASKS / f"{name}.py").read_text(), shapes=(ShapeVariant("small", SMALL[name]),))


def seeds(t: Task, backend: str) -> list[GeneratedCandidate]:
    result = HeuristicGenerator().generate_sync(GenerationRequest("s", t, backend, count=16))
    assert not result.error, result.message
    return list(result.candidates)


def seed_named(t: Task, backend: str, rationale: str) -> GeneratedCandidate:
    """The seed whose rationale starts with `rationale` (seeds are ordered by what wins, not by kind)."""
    return next(s for s in seeds(t, backend) if s.rationale.startswith(rationale))


def child(t: Task, backend: str, parent: GeneratedCandidate, mutation: str) -> GeneratedCandidate:
    p = ParentKernel(parent.source, parent.strategy, speedup=1.0, runtime_ms=1.0)
    req = GenerationRequest("m", t, backend, parent=p, mutation=mutation, count=1)
    return HeuristicGenerator().generate_sync(req).candidates[0]


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
@pytest.mark.parametrize("name", sorted(SMALL))
def test_self_report_agrees_with_the_classifier_for_every_seed_and_mutation(name: str, backend: str) -> None:
    t = task(name)
    ops = reference_op_count(t.reference_source)
    for seed in seeds(t, backend):
        for cand in [seed, *(child(t, backend, seed, m) for m in MUTATIONS)]:
            verdict = classify(cand.source, ops, cand.strategy)
            assert verdict.agrees, (cand.mutation, cand.rationale, verdict.disagreements, verdict.evidence)


def test_cpu_pointwise_chain_strategies_span_three_memory_levels() -> None:
    t = task("level2_elementwise_chain")
    direct, fused = seed_named(t, "cpu", "direct translation"), seed_named(t, "cpu", "fused:")
    tiled = child(t, "cpu", fused, "tiling")
    assert (direct.strategy.memory, fused.strategy.memory, tiled.strategy.memory) == (0, 1, 2)
    assert len({direct.strategy.cell, fused.strategy.cell, tiled.strategy.cell}) == 3


def test_vectorize_mutation_removes_and_restores_the_simd_evidence() -> None:
    t = task("level2_elementwise_chain")
    fused = seed_named(t, "cpu", "fused:")
    scalar = child(t, "cpu", fused, "vectorize")
    assert "omp simd" not in scalar.source.code and scalar.strategy.memory == 0
    again = child(t, "cpu", scalar, "vectorize")
    assert "#pragma omp simd" in again.source.code and again.strategy.memory == 1


def test_tiling_mutation_stages_each_fused_op_in_an_l1_tile_buffer() -> None:
    t = task("level2_elementwise_chain")
    tiled = child(t, "cpu", seed_named(t, "cpu", "fused:"), "tiling")
    variant = parse_variant(tiled.source.code)
    assert variant is not None and variant.cache_rows
    assert "jt += TILE" in tiled.source.code
    assert len(re.findall(r"alignas\(64\) float tile_v_\w+\[TILE\];", tiled.source.code)) >= 4
    assert "TILE" in {x.name for x in tiled.source.tunables}


def test_tiling_mutation_of_a_conv_tail_runs_the_conv_channels_last_and_transposes_through_a_tile() -> None:
    t = task("level2_conv_batchnorm_relu")
    folded = next(c for c in seeds(t, "cpu") if parse_variant(c.source.code).fold)
    nhwc = child(t, "cpu", folded, "tiling")
    assert "memory_format=torch.channels_last" in nhwc.source.glue
    assert ".permute(0, 2, 3, 1).contiguous()" in nhwc.source.glue
    assert "float tile[TILE * TILE];" in nhwc.source.code
    assert nhwc.strategy.memory == 2
    back = child(t, "cpu", nhwc, "tiling")
    assert "channels_last" not in back.source.glue


def test_reduction_mutation_of_a_sum_splits_rows_across_threads_with_atomics() -> None:
    t = task("level2_gemm_sigmoid_sum")
    fused = next(c for c in seeds(t, "cpu") if c.rationale.startswith("fused:"))
    split = child(t, "cpu", fused, "reduction")
    assert "#pragma omp atomic" in split.source.code
    assert split.strategy.parallelism == 3
    assert fused.strategy.parallelism == 2  # the per-row `omp simd reduction(+:...)`


def test_fused_cpu_softmax_evaluates_exp_once_per_element() -> None:
    t = task("level2_matmul_softmax")
    fused = seed_named(t, "cpu", "fused:")
    body = fused.source.code[fused.source.code.index("KF_DEFINE_ABI_VERSION") :]
    assert body.count("kf_exp(") == 1
    assert "orow[j] * inv" in body


def test_cuda_units_carry_only_the_reduction_helpers_they_call() -> None:
    pointwise = seeds(task("level2_elementwise_chain"), "cuda")[1].source.code
    assert "__shfl_xor_sync" not in pointwise and "__syncthreads" not in pointwise
    rows = seeds(task("level2_matmul_softmax"), "cuda")
    block = next(c for c in rows if parse_variant(c.source.code).reduction == "block").source.code
    assert "kf_block_reduce_tree" in block and "__shfl_xor_sync" not in block


def test_cpu_entry_points_are_cloned_per_isa_level_unless_dispatch_is_off() -> None:
    for cand in seeds(task("level2_conv_batchnorm_relu"), "cpu"):
        code = cand.source.code
        assert code.count("KF_EXPORT KF_CPU_ENTRY int ") == code.count("KF_EXPORT") - code.count(
            "#define KF_EXPORT"
        )
        assert 'target_clones("arch=x86-64-v4", "default")' in code
        assert "#if KF_DISPATCH &&" in code
        assert {t.name: t.values for t in cand.source.tunables}["KF_DISPATCH"] == (0, 1)


def test_square_roots_in_cpu_loops_use_the_vectorisable_helper() -> None:
    fused = seeds(task("level1_rms_norm"), "cpu")[1].source.code
    body = fused[fused.index("KF_DEFINE_ABI_VERSION") :]
    assert "kf_sqrt(" in body and "sqrtf(" not in body


def test_cpu_gemm_family_is_a_register_tile_over_cache_blocks_in_its_own_cell() -> None:
    t = task("level2_matmul_softmax")
    found = seeds(t, "cpu")
    gemm = next(c for c in found if parse_variant(c.source.code).gemm)
    assert gemm.strategy.memory == 3  # `float acc[MR][NR]` on top of `k0 += KC` slices of L1 panels
    assert gemm.strategy.cell not in {c.strategy.cell for c in found if c is not gemm}
    assert classify(gemm.source, reference_op_count(t.reference_source), gemm.strategy).agrees


def test_column_invariant_math_is_hoisted_out_of_the_row_loop_and_division_becomes_a_product() -> None:
    from kernelfoundry.generators.heuristic.cuda_columns import hoist_column_invariants

    body = [
        "  const float v_add = (red4.x + 1e-05f);",
        "  const float v_sqrt = kf_sqrt(v_add);",
        "  const float v_shift = (p0.x - v_add);",
        "  const float v_out = (v_shift / v_sqrt);",
    ]
    hoisted, rest, value = hoist_column_invariants(body, "(v_out / v_sqrt)", ["p0."], "_x", "    ")
    assert hoisted == [
        "    const float v_add_x = (red4.x + 1e-05f);",
        "    const float v_sqrt_x = kf_sqrt(v_add_x);",
        "    const float v_sqrt_x_inv = 1.0f / v_sqrt_x;",
    ]
    assert rest == [
        "  const float v_shift = (p0.x - v_add_x);",
        "  const float v_out = (v_shift * v_sqrt_x_inv);",
    ]
    assert value == "(v_out * v_sqrt_x_inv)"
