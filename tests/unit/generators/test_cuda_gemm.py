"""The CUDA GEMM family (cuda_gemm.py): where it applies, what its unit declares and launches, how the
proposer reaches it and moves it. Pure strings: nothing is compiled or run here."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelfoundry.generators.base import GeneratedCandidate, GenerationRequest, ParentKernel
from kernelfoundry.generators.heuristic import HeuristicGenerator, capture, parse_variant
from kernelfoundry.generators.heuristic.candidate import generate_source
from kernelfoundry.generators.heuristic.cpu_gemm import gemm_plan
from kernelfoundry.generators.heuristic.cuda_gemm import cuda_gemm_applies
from kernelfoundry.generators.heuristic.variant import Variant
from kernelfoundry.tasks.model import ShapeVariant, Task

TASKS = Path(__file__).resolve().parents[3] / "tasks"
LINEAR = {"batch_size": 4, "in_features": 8, "out_features": 16}
SHAPES = {
    "level2_gemm_scale_gelu": LINEAR,
    "level2_gemm_sigmoid_sum": LINEAR,
    "level2_gemm_log_softmax": {"batch_size": 4, "in_features": 8, "num_classes": 16},
    "level2_matmul_softmax": LINEAR,
    "level2_conv_bias_relu": {"batch_size": 1, "height": 8, "width": 8},
    "level2_conv_batchnorm_relu": {"batch_size": 1, "height": 8, "width": 8},
    "level2_elementwise_chain": {"batch_size": 4, "dim": 16},
}

# A linear followed by a row reduction other than the two tasks': `{op}` is filled in per test.
_ROW_TAIL = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.{op}(torch.relu(self.linear(x)), dim=1)


batch_size = 4
in_features = 8
out_features = 16


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
"""


def task(name: str) -> Task:
    return Task(name, (TASKS / f"{name}.py").read_text(), shapes=(ShapeVariant("small", SHAPES[name]),))


def cuda_seeds(t: Task) -> list[GeneratedCandidate]:
    result = HeuristicGenerator().generate_sync(GenerationRequest("g", t, "cuda", count=16))
    assert not result.error, result.message
    return list(result.candidates)


def gemm_seed(name: str) -> tuple[Task, GeneratedCandidate]:
    t = task(name)
    found = [c for c in cuda_seeds(t) if parse_variant(c.source.code).gemm]
    assert [parse_variant(c.source.code).tensor_cores for c in found] == [False, True], name
    return t, found[0]  # the SIMT kernel; the tensor-core one follows it


def child(t: Task, parent: GeneratedCandidate, mutation: str, seed: int = 0) -> GeneratedCandidate:
    p = ParentKernel(parent.source, parent.strategy, speedup=1.0, runtime_ms=1.0)
    req = GenerationRequest("m", t, "cuda", parent=p, mutation=mutation, seed=seed)
    return HeuristicGenerator().generate_sync(req).candidates[0]


@pytest.mark.parametrize("name", ["level2_gemm_scale_gelu", "level2_gemm_sigmoid_sum"])
def test_applies_to_a_linear_with_a_pointwise_or_sum_tail(name: str) -> None:
    assert cuda_gemm_applies(capture(task(name)))
    _, seed = gemm_seed(name)
    src = seed.source
    assert src.language == "cuda" and src.entry_point == "kf_forward"
    assert not src.glue  # x, weight and bias map straight onto the unit: cuBLAS is not called
    assert seed.strategy.memory == 3  # double-buffered __shared__ tiles + the `acc[KF_TM][KF_TN]` registers


@pytest.mark.parametrize(
    "name",
    [
        "level2_gemm_log_softmax",
        "level2_matmul_softmax",
        "level2_conv_bias_relu",
        "level2_conv_batchnorm_relu",
        "level2_elementwise_chain",
    ],
)
def test_refuses_softmax_tails_convolutions_and_graphs_without_a_linear(name: str) -> None:
    t = task(name)
    assert not cuda_gemm_applies(capture(t))
    # a conv's GEMM seeds are the implicit-GEMM conv family's (cuda_conv.py), on tensor cores
    gemm = [v for c in cuda_seeds(t) if (v := parse_variant(c.source.code)) is not None and v.gemm]
    assert all(v.tensor_cores for v in gemm) and bool(gemm) == ("conv" in name)
    assert all("kf_conv_args" in c.source.code for c in cuda_seeds(t) if parse_variant(c.source.code).gemm)


@pytest.mark.parametrize(("op", "applies"), [("mean", True), ("sum", True), ("amax", False), ("amin", False)])
def test_row_reductions_sum_and_mean_apply_max_and_min_are_refused(op: str, applies: bool) -> None:
    t = Task(f"linear_relu_{op}", _ROW_TAIL.format(op=op), shapes=(ShapeVariant("small", {}),))
    graph = capture(t)
    assert gemm_plan(graph) is not None  # the CPU family takes all four
    assert cuda_gemm_applies(graph) is applies


def test_the_unit_declares_its_tiles_as_guarded_tunables_that_every_combination_accepts() -> None:
    _, seed = gemm_seed("level2_gemm_scale_gelu")
    code = seed.source.code
    tunables = {t.name: t for t in seed.source.tunables}
    assert set(tunables) == {"BM", "BN", "BK"}
    assert (tunables["BM"].default, tunables["BN"].default, tunables["BK"].default) == (128, 128, 8)
    assert tunables["BM"].values == tunables["BN"].values == (64, 128)
    assert tunables["BK"].values == (8, 16)
    for t in tunables.values():
        assert f"#ifndef {t.name}\n#define {t.name} {t.default}\n#endif" in code
    # every declared value is one the static_asserts accept
    assert 'static_assert(BM == 64 || BM == 128, "' in code and 'static_assert(BK == 8 || BK == 16, "' in code


def test_the_unit_is_one_kernel_on_the_given_stream_with_the_abi_entry_point() -> None:
    _, seed = gemm_seed("level2_gemm_scale_gelu")
    code = seed.source.code
    assert '#include "kf_abi.h"' in code and "KF_DEFINE_ABI_VERSION()" in code
    assert "KF_EXPORT int kf_forward(const kf_tensor* inputs, int32_t n_inputs, kf_tensor* outputs," in code
    # the product, and the copy that stages operand rows which are no float4 runs
    assert code.count("__global__") == 2 and "kf_stage_rows" in code
    # float4 loads when both operands' rows are float4 runs (K % 4 == 0 here, 16-byte aligned pointers),
    # staged padded where the product dwarfs the copy, else the scalar-load instance
    assert "kf_gemm<1><<<grid, 256, 0, st>>>" in code and "kf_gemm<0><<<grid, 256, 0, st>>>" in code
    assert "int lda = (int)K, ldb = (int)K;" in code
    assert "if ((double)M * (double)N * (double)K >= KF_STAGE_RATIO * copied) {" in code
    assert "XA = kf_stage(X, M, &lda, &staged[0], st);" in code
    assert "WB = kf_stage(W, N, &ldb, &staged[1], st);" in code
    assert "lda % 4 == 0 && ldb % 4 == 0 &&" in code
    assert "n_inputs != 3" in code and "return KF_ERR_BAD_ARGUMENTS" in code
    assert "__shared__ __align__(16) float As[2][BK][BM + KF_PAD];" in code  # double-buffered, padded
    assert "fmaf(a[i], b[j], acc[i][j])" in code
    assert "atomicAdd" not in code and "cudaMemsetAsync" not in code  # pointwise tail: one store each
    epilogue = code[code.index("float v[KF_TN];") :]
    assert "kf_gelu(" in epilogue and "+ bz[j]" in epilogue  # bias, then the tail, per accumulator


def test_the_sum_tail_zeroes_the_output_on_the_stream_then_adds_row_partials_atomically() -> None:
    _, seed = gemm_seed("level2_gemm_sigmoid_sum")
    code = seed.source.code
    assert seed.strategy.parallelism == 3
    memset = code.index("cudaMemsetAsync(O, 0, sizeof(float) * (size_t)M, st)")
    assert memset < code.index("kf_gemm<1><<<") and memset < code.index("kf_gemm<0><<<")
    for lane in (8, 4, 2, 1):  # the 16 threads of a row: half a warp
        assert f"part += __shfl_xor_sync(0xffffffffu, part, {lane});" in code
    assert "atomicAdd(&out[r], part)" in code
    assert "part += c < N ? v_sigmoid : 0.0f;" in code  # columns past N add nothing


def test_a_mean_tail_scales_each_partial_by_one_over_n() -> None:
    t = Task("linear_relu_mean", _ROW_TAIL.format(op="mean"), shapes=(ShapeVariant("small", {}),))
    code = generate_source(capture(t), t.name, "cuda", Variant(gemm=True)).code
    assert "atomicAdd(&out[r], part * (1.0f / (float)N));" in code


def test_the_unvectorised_variant_launches_only_the_scalar_load_instance() -> None:
    t = task("level2_gemm_scale_gelu")
    code = generate_source(capture(t), t.name, "cuda", Variant(gemm=True, vectorize=False)).code
    assert "kf_gemm<0><<<" in code and "kf_gemm<1><<<" not in code


def test_cuda_seed_order_puts_the_gemm_family_after_the_fused_and_folded_seeds() -> None:
    for name in ("level2_gemm_scale_gelu", "level2_gemm_sigmoid_sum"):
        variants = [parse_variant(c.source.code) for c in cuda_seeds(task(name))]
        at = next(i for i, v in enumerate(variants) if v.gemm)
        fused = [i for i, v in enumerate(variants) if v == Variant() or v == Variant(fold=True)]
        assert fused and max(fused) < at < len(variants) - 1, (name, variants)
        assert not variants[-1].fuse  # the direct translation stays last


def test_fusion_moves_a_fused_parent_into_the_family_and_a_gemm_parent_back_to_cublas() -> None:
    t, gemm = gemm_seed("level2_gemm_sigmoid_sum")
    fused = next(c for c in cuda_seeds(t) if parse_variant(c.source.code) == Variant())
    assert fused.source.glue  # the linear stays in torch (cuBLAS)
    into = child(t, fused, "fusion")
    assert parse_variant(into.source.code).gemm and not into.source.glue
    assert into.source.code == gemm.source.code
    back = child(t, gemm, "fusion")
    assert not parse_variant(back.source.code).gemm and back.source.glue


@pytest.mark.parametrize(("mutation", "names"), [("tiling", {"BM", "BN"}), ("reduction", {"BK"})])
def test_tiling_and_reduction_of_a_gemm_parent_move_its_block_tile_or_k_slice(
    mutation: str, names: set[str]
) -> None:
    t, gemm = gemm_seed("level2_gemm_scale_gelu")
    for seed in range(4):
        moved = child(t, gemm, mutation, seed)
        assert moved.source.code == gemm.source.code
        (name,) = moved.source.params
        assert name in names
        declared = next(x for x in moved.source.tunables if x.name == name)
        assert moved.source.params[name] != declared.default


def test_retune_and_vectorize_keep_a_gemm_parent_in_the_family() -> None:
    t, gemm = gemm_seed("level2_gemm_scale_gelu")
    retuned = child(t, gemm, "retune", 3)
    assert retuned.source.code == gemm.source.code and set(retuned.source.params) == {"BM", "BN", "BK"}
    scalar = child(t, gemm, "vectorize")
    variant = parse_variant(scalar.source.code)
    assert variant.gemm and not variant.vectorize and "kf_gemm<1><<<" not in scalar.source.code


_MATMUL = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return {expr}


def get_inputs():
    return [torch.randn({a}), torch.randn({b})]


def get_init_inputs():
    return []
"""


def matmul_seeds(expr: str, a: str = "8, 12", b: str = "12, 16") -> list[GeneratedCandidate]:
    source = _MATMUL.format(expr=expr, a=a, b=b)
    return cuda_seeds(Task("mm", source, shapes=(ShapeVariant("small", {}),)))


@pytest.mark.parametrize(
    ("expr", "a", "b", "a_kmajor", "b_kmajor", "strides"),
    [
        ("torch.matmul(A, B)", "8, 12", "12, 16", 0, 1, "lda = (int)K, ldb = (int)N"),
        ("torch.matmul(A.T, B)", "12, 8", "12, 16", 1, 1, "lda = (int)M, ldb = (int)N"),
        ("A @ B.t()", "8, 12", "16, 12", 0, 0, "lda = (int)K, ldb = (int)K"),
        ("A.T @ B.T", "12, 8", "16, 12", 1, 0, "lda = (int)M, ldb = (int)K"),
        ("torch.matmul(A, B)", "2, 8, 12", "12, 16", 0, 1, "lda = (int)K, ldb = (int)N"),
    ],
)
def test_a_bare_matmul_leads_with_the_gemm_reading_each_operand_as_it_is_laid_out(
    expr: str, a: str, b: str, a_kmajor: int, b_kmajor: int, strides: str
) -> None:
    seeds = matmul_seeds(expr, a, b)
    first = seeds[0]
    assert getattr(parse_variant(first.source.code), "gemm", False)  # before the one-thread-a-row op kernel
    code = first.source.code
    assert not first.source.glue  # A and B go to the unit as given: no copy, no cuBLAS
    assert f"#define KF_A_KMAJOR {a_kmajor}" in code and f"#define KF_B_KMAJOR {b_kmajor}" in code
    assert "#define KF_TILE_NEEDED 1" in code
    # each operand's rows are its contiguous dim: float4 loads where those are float4 runs
    assert f"int {strides};" in code
    assert "v[j] = acc[i][j];" in code and "(void)bias;" in code
    # the output keeps A's leading dims: (2, 8, 16) is M = 16 rows of N
    assert "kf_prod(&so, 0, so.nd - 1) != M || so.d[so.nd - 1] != N" in code


@pytest.mark.parametrize(
    ("expr", "needed", "value"),
    [
        ("torch.triu(torch.matmul(A, B))", "(n0 + BN - 1 - m0 >= 0)", "- r >= 0 ? acc[i][j] : 0.0f"),
        ("torch.tril(A @ B, diagonal=-2)", "(n0 - (m0 + BM - 1) <= -2)", "- r <= -2 ? acc[i][j] : 0.0f"),
    ],
)
def test_a_kept_triangle_zeroes_the_rest_and_skips_the_k_loop_of_tiles_wholly_outside(
    expr: str, needed: str, value: str
) -> None:
    code = matmul_seeds(expr, "8, 12", "12, 8")[0].source.code
    assert f"#define KF_TILE_NEEDED {needed}" in code
    assert "const int slices = KF_TILE_NEEDED ? (ke - kb + BK - 1) / BK : 0;" in code
    assert value in code


def test_a_matmul_with_a_tail_keeps_cublas_first_and_offers_the_fused_gemm() -> None:
    seeds = matmul_seeds("torch.relu(A @ B) * 0.5")
    gemm = [i for i, c in enumerate(seeds) if getattr(parse_variant(c.source.code), "gemm", False)]
    assert gemm and gemm[0] > 0
    assert seeds[0].source.glue  # the fused seed: torch's matmul, the tail in one generated pass
    code = seeds[gemm[0]].source.code
    assert not seeds[gemm[0]].source.glue
    epilogue = code[code.index("float v[KF_TN];") :]
    assert "const float v_relu = kf_max(y, 0.0f);" in epilogue and "(v_relu * 0.5f)" in epilogue


def test_the_tensor_core_seed_follows_the_simt_one_with_3xtf32_mmas_and_its_own_layout() -> None:
    t = task("level2_gemm_sigmoid_sum")
    found = [c for c in cuda_seeds(t) if parse_variant(c.source.code).gemm]
    simt, tc = found
    code = tc.source.code
    assert parse_variant(code).tensor_cores and not tc.source.glue
    assert {x.name: x.values for x in tc.source.tunables} == {"BK": (8, 16), "KF_MIN_BLOCKS": (1, 2)}
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in code
    # big, then what remains, rounded by half a TF32 unit added to the bits (no cvt at the fragment reads);
    # the GEMM's operands are not pre-rounded
    assert 'asm("cvt' not in code and "return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;" in code
    assert "big = kf_tf32_bits(x);" in code
    assert "return KF_PREROUNDED ? __float_as_uint(x) : kf_round_tf32(x);" in code
    assert "#define KF_PREROUNDED 0" in code
    assert "small = __float_as_uint(x - __uint_as_float(big)) + 0x1000u;" in code
    loop = code[code.index("for (int k8 = 0; k8 < BK; k8 += 8)") :]
    # three MMAs per product, the small terms first
    assert loop.index("kf_mma(c0, c1, c2, c3, al, bh") < loop.index("kf_mma(c0, c1, c2, c3, ah, bl")
    assert loop.index("kf_mma(c0, c1, c2, c3, ah, bl") < loop.index("kf_mma(c0, c1, c2, c3, ah, bh")
    assert "float As[2][BK][BM + KF_PAD]" in code and "#define KF_PAD 8" in code
    # the epilogue reads the MMA accumulator layout: rows g and g + 8 of each m16 tile, column pairs
    assert "const int r = m0 + wm * (BM / 2) + (i >> 1) * 16 + (i & 1) * 8 + g;" in code
    assert "#define BM 128" in code and "#define KF_TF32_TERMS 3" in code  # the GEMM's defaults
    assert "part += __shfl_xor_sync(0xffffffffu, part, 1);" in code
    assert "part += __shfl_xor_sync(0xffffffffu, part, 2);" in code
    assert "if (tig == 0 && r < M) atomicAdd(&out[r], part);" in code
    assert "mma.sync" not in simt.source.code and "kf_mma" not in simt.source.code
    assert (simt.strategy.parallelism, tc.strategy.parallelism) == (3, 3)  # both add row partials


def test_a_tensor_core_unit_stores_its_column_pairs_as_float2() -> None:
    code = matmul_seeds("torch.matmul(A, B)")[1].source.code
    assert parse_variant(code).tensor_cores
    assert "*reinterpret_cast<float2*>(orow + c) = make_float2(v[q * 2], v[q * 2 + 1]);" in code
    assert "const int c = n0 + wn * (8 * KF_WN) + q * 8 + tig * 2;" in code  # KF_WN 4: 32 columns


def test_fusion_hands_a_tensor_core_parent_back_to_torch_without_the_flag() -> None:
    t = task("level2_gemm_scale_gelu")
    tc = next(c for c in cuda_seeds(t) if getattr(parse_variant(c.source.code), "tensor_cores", False))
    back = parse_variant(child(t, tc, "fusion").source.code)
    assert back is not None and not back.gemm and not back.tensor_cores


def test_a_bare_matmul_splits_a_long_k_across_blocks_when_its_tiles_are_too_few() -> None:
    code = matmul_seeds("torch.matmul(A, B)")[0].source.code
    assert "cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)" in code
    assert "if (tiles < sms && K >= 2048) splits = (int)(want < K / 1024 ? want : K / 1024);" in code
    # the output is zeroed on the stream first, the splits add their partial products into it
    memset = code.index("cudaMemsetAsync(O, 0, sizeof(float) * (size_t)(M * N), st)")
    assert memset < code.index("kf_gemm<1><<<")
    assert "if (c + u < N) atomicAdd(orow + c + u, v[q * 4 + u]);" in code
    assert "const dim3 grid((unsigned)ntiles, (unsigned)mtiles, (unsigned)splits);" in code
    assert "#define KF_KSPLIT blockIdx.z" in code
    assert "const int kb = KF_KSPLIT * kchunk, ke = K - kb < kchunk ? K : kb + kchunk;" in code
    # a tail needs the whole sum: no split
    tail = matmul_seeds("torch.relu(A @ B) * 0.5")
    code = next(c.source.code for c in tail if getattr(parse_variant(c.source.code), "gemm", False))
    assert "atomicAdd" not in code and "cudaDevAttrMultiProcessorCount" not in code
    assert "int splits = 1;" in code
