"""The heuristic proposer's pure behaviour: capture, classification, planning, variants, mutations."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelfoundry.domain.descriptors import Descriptors, classify
from kernelfoundry.generators.base import GenerationRequest, Generator, ParentKernel
from kernelfoundry.generators.heuristic import HeuristicGenerator, capture, parse_tunables, parse_variant
from kernelfoundry.generators.heuristic.classify import classify_op
from kernelfoundry.generators.heuristic.plan import partition
from kernelfoundry.generators.heuristic.pools import fuse_pools
from kernelfoundry.tasks.analysis import reference_op_count
from kernelfoundry.tasks.model import ShapeVariant, Task

TASKS = Path(__file__).resolve().parents[3] / "tasks"


def small_task(name: str, **overrides: int) -> Task:
    return Task(name, (TASKS / f"{name}.py").read_text(), shapes=(ShapeVariant("small", overrides),))


def _chain_source() -> str:
    return (TASKS / "level2_elementwise_chain.py").read_text()


def test_heuristic_generator_satisfies_the_generator_protocol() -> None:
    assert isinstance(HeuristicGenerator(), Generator)


def test_request_rejects_an_unknown_mutation() -> None:
    with pytest.raises(ValueError, match="unknown mutation"):
        GenerationRequest("r", small_task("level1_relu", batch_size=2, dim=8), "cpu", mutation="teleport")


def test_classification_of_ops() -> None:
    assert classify_op("gelu") == "pointwise"
    assert classify_op("sum") == "reduction"
    assert classify_op("softmax") == "rowop"
    assert classify_op("linear") == "heavy"
    assert classify_op("max_pool2d") == "pooling"
    assert classify_op("adaptive_avg_pool2d") == "pooling"
    assert classify_op("getitem") == "other"


POOLING_TAIL = (Path(__file__).resolve().parents[2] / "fixtures" / "tasks" / "conv_pool_tail.py").read_text()


def test_pooling_is_its_own_kind_kept_in_torch_unless_a_fixed_window_module_fuses() -> None:
    task = Task("pool_tail", POOLING_TAIL, shapes=(ShapeVariant("small", {}),))
    graph = capture(task)
    kinds = {n.op: n.kind for n in graph.nodes}
    assert kinds["max_pool2d"] == "pooling" and kinds["avg_pool2d"] == "pooling"
    assert kinds["module"] == "heavy"
    parts = partition(graph, fuse=True)
    # relu between the conv and the max pool, then x * 2 before the average pool, then + 1 and tanh
    assert len(parts) == 3
    # the fused seeds generate the MaxPool2d module with the relu before it and the x * 2 after it
    # (pools.py); the functional average pool stays in torch
    fused = partition(fuse_pools(graph), fuse=True)
    assert [[s.kind for s in p.steps] for p in fused] == [["pool"], ["pointwise"]]
    result = HeuristicGenerator().generate_sync(GenerationRequest("p", task, "cpu", count=2))
    assert not result.error, result.message
    glue = result.candidates[0].source.glue
    assert "self.pool(" not in glue and "avg_pool2d(" in glue and glue.count("kf.launch(") == 2


def test_capture_bakes_init_scalars_and_records_shapes() -> None:
    graph = capture(small_task("level2_elementwise_chain", batch_size=4, dim=16))
    ops = [n.op for n in graph.nodes]
    assert ops == ["mul", "add", "gelu", "tanh", "mul", "add"]
    assert graph.nodes[0].args[1] == pytest.approx(1.7)
    assert graph.shapes[graph.outputs[0]] == (4, 16)


def test_capture_lowers_inference_batch_norm_to_a_per_channel_pointwise_op() -> None:
    graph = capture(small_task("level2_conv_batchnorm_relu", batch_size=1, height=8, width=8))
    bn = next(n for n in graph.nodes if n.op == "batch_norm")
    assert bn.kind == "pointwise"
    assert all(a.trail == 2 for a in bn.args[1:])  # (C,) statistics viewed as (C, 1, 1)


def test_fused_plan_has_one_step_and_direct_plan_one_per_op() -> None:
    graph = capture(small_task("level2_elementwise_chain", batch_size=4, dim=16))
    assert len(partition(graph, fuse=True)[0].steps) == 1
    assert len(partition(graph, fuse=False)[0].steps) == len(graph.nodes)


def test_softmax_epilogue_is_fused_into_the_row_step() -> None:
    graph = capture(small_task("level2_softmax_scale_residual", batch_size=4, dim=32))
    steps = partition(graph, fuse=True)[0].steps
    assert [s.kind for s in steps] == ["rowop"]
    assert steps[0].epilogue


def test_a_values_and_indices_pair_whose_values_are_lowered_leaves_no_torch_node() -> None:
    """torch.min(x, dim)[0] lowers to amin: the pair it came from, unused, would split the generated
    nodes around it into two parts with a materialised intermediate between."""
    source = (
        "import torch\nimport torch.nn as nn\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.tanh(torch.min(x * 2.0, dim=1, keepdim=True)[0])\n"
        "def get_inputs():\n    return [torch.randn(2, 5, 3, 4)]\n"
        "def get_init_inputs():\n    return []\n"
    )
    graph = capture(Task("pair", source, shapes=(ShapeVariant("s"),)))
    assert [n.op for n in graph.nodes if n.kind in ("other", "heavy")] == []
    parts = partition(graph, fuse=True)
    assert len(parts) == 1 and [s.kind for s in parts[0].steps] == ["reduction", "pointwise"]


def test_heavy_ops_split_the_graph_into_parts_called_from_glue() -> None:
    graph = capture(small_task("level2_conv_bias_relu", batch_size=1, height=8, width=8))
    parts = partition(graph, fuse=True)
    assert [p.entry_point for p in parts] == ["kf_part0"]
    assert parts[0].inputs == ["conv", "p_bias"]


def test_cpu_seeds_put_the_fused_variant_first_the_direct_translation_last_with_honest_descriptors() -> None:
    result = HeuristicGenerator().generate_sync(
        GenerationRequest("r", small_task("level2_elementwise_chain", batch_size=4, dim=16), "cpu", count=4)
    )
    assert not result.error
    fused, direct = result.candidates[0], result.candidates[-1]
    assert direct.rationale.startswith("direct translation")
    assert direct.strategy.memory == 0 and direct.strategy.parallelism == 0
    assert "omp simd" not in direct.source.code
    assert fused.strategy == Descriptors(1, 1, 0)
    assert "#pragma omp simd" in fused.source.code
    ops = reference_op_count(_chain_source())
    for candidate in (direct, fused):
        assert classify(candidate.source, ops, candidate.strategy).agrees


@pytest.mark.parametrize(
    ("name", "shape", "first_two"),
    [
        ("level1_softmax", {"batch_size": 2, "dim": 2048}, ["cache_rows", "row_warps"]),
        ("level1_layernorm", {"batch_size": 2, "seq_len": 3, "hidden": 2048}, ["cache_rows", "row_warps"]),
        # rows of at most 1024: a warp a row leads (a block a row leaves most threads idle)
        ("level1_softmax", {"batch_size": 2, "dim": 64}, ["row_warps", "cache_rows"]),
        ("level1_layernorm", {"batch_size": 2, "seq_len": 3, "hidden": 1024}, ["row_warps", "cache_rows"]),
        ("level1_max_reduction", {"batch_size": 2, "dim1": 5, "dim2": 64}, ["row_warps", "fused"]),
        ("level2_elementwise_chain", {"batch_size": 4, "dim": 16}, ["fused", "scalar"]),
    ],
)
def test_cuda_seeds_put_the_strategies_that_win_first_and_the_direct_translation_last(
    name: str, shape: dict, first_two: list[str]
) -> None:
    """The evolver's first generation takes `population` seeds (often 2): they must be the strong ones."""
    result = HeuristicGenerator().generate_sync(
        GenerationRequest("r", small_task(name, **shape), "cuda", count=16)
    )
    variants = [parse_variant(c.source.code) for c in result.candidates]

    def kind(v: object) -> str:
        assert v is not None
        if v.cache_rows:
            return "cache_rows"
        if v.row_warps:
            return "row_warps"
        if not v.fuse:
            return "direct"
        return "fused" if v.vectorize else "scalar"

    assert [kind(v) for v in variants[:2]] == first_two
    assert kind(variants[-1]) == "direct" and [kind(v) for v in variants].count("direct") == 1


def test_generated_units_declare_guarded_tunables() -> None:
    result = HeuristicGenerator().generate_sync(
        GenerationRequest("r", small_task("level1_softmax", batch_size=2, dim=8), "cpu", count=2)
    )
    source = result.candidates[1].source
    names = {t.name for t in parse_tunables(source.code)}
    assert {"CHUNK", "INNER_TILE", "KF_FAST_MATH"} <= names
    for name in names:
        assert f"#ifndef {name}" in source.code
    assert source.tunables == parse_tunables(source.code)


def test_glue_keeps_the_heavy_op_and_launches_the_tail() -> None:
    result = HeuristicGenerator().generate_sync(
        GenerationRequest("r", small_task("level2_gemm_scale_gelu", batch_size=4), "cpu", count=3)
    )
    glue = next(c.source.glue for c in result.candidates if "fused" in c.rationale and c.source.glue)
    assert "self.gemm = nn.Linear(" in glue
    assert "kf.launch('kf_part0'" in glue
    assert "F.gelu" not in glue and "torch.gelu" not in glue


def _parent(task: Task, rationale: str = "fused:") -> ParentKernel:
    """The CPU seed whose rationale starts with `rationale` (the fused seed by default)."""
    result = HeuristicGenerator().generate_sync(GenerationRequest("s", task, "cpu", count=16))
    seed = next(c for c in result.candidates if c.rationale.startswith(rationale))
    return ParentKernel(seed.source, seed.strategy, speedup=1.0, runtime_ms=1.0)


def test_fusion_mutation_moves_the_fusion_boundary() -> None:
    task = small_task("level2_elementwise_chain", batch_size=4, dim=16)
    result = HeuristicGenerator().generate_sync(
        GenerationRequest("m", task, "cpu", parent=_parent(task), mutation="fusion")
    )
    child = result.candidates[0]
    assert child.mutation == "fusion"
    variant = parse_variant(child.source.code)
    assert variant is not None and variant.fuse is False


def test_retune_mutation_changes_only_tunable_values() -> None:
    task = small_task("level1_relu", batch_size=2, dim=8)
    parent = _parent(task)
    result = HeuristicGenerator().generate_sync(
        GenerationRequest("m", task, "cpu", parent=parent, mutation="retune", seed=3)
    )
    child = result.candidates[0]
    assert child.source.code == parent.source.code
    assert set(child.source.params) == {t.name for t in parent.source.tunables}


def test_proposal_weights_steer_the_unnamed_mutation() -> None:
    task = small_task("level1_relu", batch_size=2, dim=8)
    weights = {m: 0.0 for m in ("fusion", "reduction", "tiling", "vectorize", "parallel")} | {"retune": 1.0}
    result = HeuristicGenerator().generate_sync(
        GenerationRequest("m", task, "cpu", parent=_parent(task), proposal_weights=weights, count=3)
    )
    assert [c.mutation for c in result.candidates] == ["retune"] * 3


def test_feedback_on_the_parent_produces_a_conservative_repair() -> None:
    task = small_task("level1_relu", batch_size=2, dim=8)
    parent = _parent(task)
    broken = ParentKernel(
        parent.source, parent.descriptors, None, None, feedback="output_mismatch: max err 3.0"
    )
    result = HeuristicGenerator().generate_sync(
        GenerationRequest("m", task, "cpu", parent=broken, repair=True)
    )
    child = result.candidates[0]
    assert child.mutation == "repair"
    assert "output_mismatch" in child.rationale
    assert "#pragma omp simd" not in child.source.code


def test_an_untraceable_reference_is_reported_as_unsupported() -> None:
    source = (
        "import torch\nimport torch.nn as nn\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n"
        "        if x.sum() > 0:\n            return x\n        return -x\n"
        "def get_inputs():\n    return [torch.randn(4)]\n"
        "def get_init_inputs():\n    return []\n"
    )
    result = HeuristicGenerator().generate_sync(GenerationRequest("r", Task("branchy", source), "cpu"))
    assert result.candidates == ()
    assert result.error == "unsupported"
    assert "torch.fx" in result.message


def test_fold_seed_moves_the_batch_norm_into_the_conv_and_leaves_the_activation_to_the_kernel() -> None:
    task = small_task("level2_conv_batchnorm_relu", batch_size=1, height=8, width=8)
    result = HeuristicGenerator().generate_sync(GenerationRequest("r", task, "cpu", count=8))
    folded = next(c for c in result.candidates if parse_variant(c.source.code).fold)
    ops = reference_op_count(task.reference_source)
    assert classify(folded.source, ops, folded.strategy).agrees  # the fold itself lives in the glue
    assert "F.conv2d(x, (self.conv.weight * " in folded.source.glue
    assert "torch.rsqrt(self.bn.running_var" in folded.source.glue
    assert "batch_norm" not in folded.source.code  # the unit only applies the ReLU


# -- CPU GEMM family (linear + row-wise tail in one unit) --------------------------------------------


def _gemm_seed(name: str = "level2_matmul_softmax", **shape: int):
    shape = shape or {"batch_size": 4, "in_features": 8, "out_features": 16}
    t = small_task(name, **shape)
    found = HeuristicGenerator().generate_sync(GenerationRequest("g", t, "cpu", count=8)).candidates
    return t, [c for c in found if parse_variant(c.source.code).gemm]


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("level2_matmul_softmax", {"batch_size": 4, "in_features": 8, "out_features": 16}),
        ("level2_gemm_log_softmax", {"batch_size": 4, "in_features": 8, "num_classes": 16}),
        ("level2_gemm_scale_gelu", {"batch_size": 4, "in_features": 8, "out_features": 16}),
        ("level2_gemm_sigmoid_sum", {"batch_size": 4, "in_features": 8, "out_features": 16}),
    ],
)
def test_cpu_seeds_include_the_gemm_family_for_a_linear_with_a_row_tail(name: str, shape: dict) -> None:
    _, gemm = _gemm_seed(name, **shape)
    assert len(gemm) == 1
    src = gemm[0].source
    assert src.entry_point == "kf_forward" and not src.glue  # x, weight, bias map straight onto the unit
    assert "kf_gemm_tile" in src.code and "k0 += KC" in src.code


def test_gemm_family_declares_its_blocking_as_tunables_with_generic_defaults() -> None:
    _, gemm = _gemm_seed()
    tunables = {t.name: t for t in gemm[0].source.tunables}
    assert {"MR", "NV", "MC", "KC", "KF_FAST_MATH", "KF_DISPATCH"} <= set(tunables)
    assert (tunables["MR"].default, tunables["NV"].default) == (8, 2)  # 8 x 32 micro-tile, 16 accumulators
    assert (tunables["MC"].default, tunables["KC"].default) == (64, 256)
    for t in tunables.values():
        assert t.default in t.values
        assert f"#ifndef {t.name}" in gemm[0].source.code


def test_gemm_family_is_not_offered_where_it_does_not_apply() -> None:
    """Not for a rowop over groups of channels after a conv, nor without a linear / conv at all."""
    for name, shape in [
        ("level2_conv_groupnorm_tanh", {"batch_size": 1, "height": 8, "width": 8}),
        ("level2_softmax_scale_residual", {"batch_size": 2, "dim": 16}),
    ]:
        t = small_task(name, **shape)
        found = HeuristicGenerator().generate_sync(GenerationRequest("g", t, "cpu", count=8)).candidates
        assert not any(parse_variant(c.source.code).gemm for c in found), name
    t = small_task("level2_matmul_softmax", batch_size=4, in_features=8, out_features=16)
    cuda = HeuristicGenerator().generate_sync(GenerationRequest("g", t, "cuda", count=16)).candidates
    assert not any('"gemm"' in c.source.code for c in cuda)  # CUDA units read as before the family


def _child(t: Task, parent, mutation: str, seed: int = 0):
    p = ParentKernel(parent.source, parent.strategy, speedup=1.0, runtime_ms=1.0)
    req = GenerationRequest("m", t, "cpu", parent=p, mutation=mutation, seed=seed)
    return HeuristicGenerator().generate_sync(req).candidates[0]


def test_fusion_moves_a_fused_linear_tail_into_the_gemm_family_and_back() -> None:
    t, gemm = _gemm_seed()
    found = HeuristicGenerator().generate_sync(GenerationRequest("g", t, "cpu", count=8)).candidates
    fused = next(c for c in found if c.rationale.startswith("fused:"))
    assert not parse_variant(fused.source.code).gemm and fused.source.glue
    into = _child(t, fused, "fusion")
    assert parse_variant(into.source.code).gemm and not into.source.glue
    back = _child(t, gemm[0], "fusion")
    assert not parse_variant(back.source.code).gemm and back.source.glue


@pytest.mark.parametrize(("mutation", "names"), [("tiling", {"MC", "KC"}), ("reduction", {"MR", "NV"})])
def test_tiling_and_reduction_of_a_gemm_parent_move_its_cache_or_register_blocking(
    mutation: str, names: set[str]
) -> None:
    t, gemm = _gemm_seed()
    for seed in range(6):
        child = _child(t, gemm[0], mutation, seed)
        assert child.source.code == gemm[0].source.code
        (name,) = child.source.params
        assert name in names
        declared = next(x for x in child.source.tunables if x.name == name)
        assert child.source.params[name] != declared.default


@pytest.mark.parametrize("name", ["level2_conv_bias_relu", "level2_conv_batchnorm_relu"])
def test_cpu_seeds_include_the_implicit_gemm_conv_for_a_conv_with_a_per_channel_tail(name: str) -> None:
    t = small_task(name, batch_size=1, height=8, width=8)
    found = HeuristicGenerator().generate_sync(GenerationRequest("g", t, "cpu", count=8)).candidates
    conv = [c for c in found if parse_variant(c.source.code).gemm]
    assert len(conv) == 1
    src = conv[0].source
    assert src.entry_point == "kf_forward" and not src.glue  # input, parameters and buffers map straight on
    assert "kf_conv_tile" in src.code
    tunables = {x.name: x for x in src.tunables}
    assert {"MR", "NV", "KF_FAST_MATH", "KF_DISPATCH"} <= set(tunables)
    assert (tunables["MR"].default, tunables["NV"].default) == (8, 2)
    fused = next(c for c in found if c.rationale.startswith("fused:"))
    into = _child(t, fused, "fusion")  # the fused (library conv) parent fuses the conv in
    assert parse_variant(into.source.code).gemm and "kf_conv_tile" in into.source.code
