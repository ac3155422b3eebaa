"""Turning a captured graph and a Variant into one candidate: unit code, glue, tunables, descriptors.

Pure code generation (no compiler, no evaluation). The self-reported descriptors are the cell the
archive's classifier (kernelfoundry.domain.descriptors.classify) assigns to the emitted unit, predicted
from the strategy: CPU `omp simd` -> memory 1, L1 tile buffers / the channels-last transpose tile -> 2
(3 with a reduction's column accumulators on top), `omp simd reduction` -> parallelism 2, `omp atomic`
row splits -> 3; CUDA float4 -> memory 1, __shared__ reduction scratch -> 2, tree (barriers only) -> 1,
warp shuffles -> 2, atomics -> 3, online softmax (`m_new`) -> algorithm 2; the CPU GEMM family (a
register tile `acc[MR][NR]` over KC slices / a local panel) -> memory 3, with `omp simd reduction` row
tails -> parallelism 2; the CUDA GEMM family (double-buffered `__shared__` tiles, `float acc[TM][TN]`)
-> memory 3, its barriers -> parallelism 1, atomics for a sum / mean tail -> 3; the CUDA implicit-GEMM
conv (tensor cores) -> memory 3, parallelism 2. The classifier's fusion
rule counts math-op families in the unit, so the algorithm axis otherwise comes from the unit itself.
"""

from __future__ import annotations

from kernelfoundry.domain.descriptors import Descriptors, classify
from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.domain.tunables import parse_tunables
from kernelfoundry.generators.heuristic.attention import lower_attention
from kernelfoundry.generators.heuristic.classify import KEPT_IN_TORCH
from kernelfoundry.generators.heuristic.conv_means import lower_conv_means
from kernelfoundry.generators.heuristic.cpu import ISA_DISPATCH, CpuEmitter
from kernelfoundry.generators.heuristic.cpu_conv import conv_plan, conv_unit
from kernelfoundry.generators.heuristic.cpu_gemm import gemm_plan, gemm_unit
from kernelfoundry.generators.heuristic.cuda_conv_chain import conv_family_applies, conv_family_unit
from kernelfoundry.generators.heuristic.cuda_gemm import cuda_gemm_plan, cuda_gemm_unit
from kernelfoundry.generators.heuristic.feature_means import lower_feature_means
from kernelfoundry.generators.heuristic.fold import fold_affine_tails
from kernelfoundry.generators.heuristic.glue import glue_source
from kernelfoundry.generators.heuristic.graph import Graph, UnsupportedGraph
from kernelfoundry.generators.heuristic.layout import channels_last_source, to_channels_last_entry
from kernelfoundry.generators.heuristic.opkernels import OpKernel, op_kernel
from kernelfoundry.generators.heuristic.opkernels_code import op_entries, op_unit
from kernelfoundry.generators.heuristic.plan import partition
from kernelfoundry.generators.heuristic.pools import fuse_pools
from kernelfoundry.generators.heuristic.unbias import unbias_convs
from kernelfoundry.generators.heuristic.variant import Variant


def lower_means(graph: Graph) -> Graph:
    """The graph with a mean (or sum) over a conv's spatial dims or a linear's features computed without
    the conv or the linear where only affine ops lie between (conv_means.py, feature_means.py)."""
    return lower_feature_means(lower_conv_means(graph))


def means_lowered(variant: Variant) -> bool:
    """Whether the variant's graph is `lower_means`'s: the fused seeds that neither fold affine tails
    nor keep the conv or linear literally (Variant.literal_means)."""
    return variant.fuse and not variant.fold and not variant.literal_means


def descriptors_for(
    graph: Graph, backend: str, variant: Variant, source: KernelSource, reference_ops: int
) -> Descriptors:
    """The self-report: memory and parallelism from the strategy the variant made the emitter write,
    algorithm from the emitted unit by the archive's fusion rule (it counts the math-op families in the
    code against the reference's op count, so it depends on the task as much as on the strategy)."""
    if means_lowered(variant):
        graph = lower_means(graph)
    if variant.fold:
        graph, _ = fold_affine_tails(graph)
    if variant.fuse:
        graph = lower_attention(graph)
    algorithm = classify(source, reference_ops).descriptors.algorithm
    has_sum = any(n.op in ("sum", "mean") and n.kind == "reduction" for n in graph.nodes)
    if backend == "cpu" and variant.gemm and conv_plan(graph) is not None:
        # a register tile (`acc[MR][NR]`) over a local `panel` for ragged tiles; pointwise tail only
        return Descriptors(memory=3, algorithm=algorithm, parallelism=0)
    if backend == "cpu" and variant.gemm and gemm_plan(graph) is not None:
        # register accumulators (`acc[MR][NR]`) over KC-stepped L1 panels; the tail's row reductions
        # are `omp simd reduction(...)` when vectorised
        plan = gemm_plan(graph)
        assert plan is not None
        rows = plan.step is not None and plan.step.kind != "pointwise" and variant.vectorize
        return Descriptors(memory=3, algorithm=algorithm, parallelism=2 if rows else 0)
    if backend == "cuda" and variant.gemm and conv_family_applies(graph):
        # the tensor-core GEMM's tiles (memory 3) and warp-wide MMAs (parallelism 2)
        return Descriptors(memory=3, algorithm=algorithm, parallelism=2)
    if backend == "cuda" and variant.gemm and cuda_gemm_plan(graph) is not None:
        # double-buffered shared tiles + a register tile; one barrier per K slice, and a sum / mean
        # tail adds each block's row partials with atomicAdd (after half-warp shuffles)
        plan = cuda_gemm_plan(graph)
        assert plan is not None
        return Descriptors(
            memory=3,
            algorithm=algorithm,
            parallelism=3
            if plan.step is not None and plan.step.kind == "reduction"
            else (2 if variant.tensor_cores else 1),  # warp-wide MMAs
        )
    if backend == "cpu":
        parts = partition(fuse_pools(graph) if variant.fuse else graph, variant.fuse)
        kinds = {s.kind for p in parts for s in p.steps}
        nhwc = variant.channels_last and channels_last_source(graph, parts) is not None
        tiled = variant.cache_rows and variant.fuse and not nhwc and "pointwise" in kinds
        vector = variant.fuse and variant.vectorize
        memory = 2 if nhwc or tiled else int(vector)
        if memory == 2 and "reduction" in kinds:
            memory = 3  # the reduction's column accumulators (`acc[INNER_TILE]`) on top of the tile
        parallelism = 0
        if vector and not nhwc and kinds & {"reduction", "rowop"}:
            parallelism = 2  # `omp simd reduction(...)` per row
        if variant.reduction == "atomic" and has_sum:
            parallelism = 3
        return Descriptors(memory=memory, algorithm=algorithm, parallelism=parallelism)
    has_softmax = any(n.op in ("softmax", "log_softmax") for n in graph.nodes)
    if variant.online and has_softmax:
        algorithm = 2  # the running max/sum (`m_new`) reformulation of softmax
    has_rows = any(n.kind in ("reduction", "rowop") for n in graph.nodes)
    unbiased = fuse_pools(unbias_convs(graph)) if variant.fuse else unbias_convs(graph)
    nhwc = variant.channels_last and (
        channels_last_source(unbiased, partition(unbiased, variant.fuse, axis_leaves=True), "cuda")
        is not None
    )
    # row kernels stage their block reduction in __shared__ scratch, a channels-last tail its transpose;
    # pointwise kernels use float4
    memory = 2 if has_rows or nhwc else int(variant.vectorize and variant.fuse)
    parallelism = 1 if nhwc else 0  # the block's threads share the transposing tile
    if has_rows:
        parallelism = {"block": 1, "warp": 2, "atomic": 3}.get(variant.reduction, 1)
        if variant.reduction == "atomic" and not has_sum:
            parallelism = 2
    return Descriptors(memory=memory, algorithm=algorithm, parallelism=parallelism)


def generate_source(graph: Graph, task_name: str, backend: str, variant: Variant) -> KernelSource:
    """One candidate's KernelSource for the graph; raises UnsupportedGraph when it cannot."""
    fuse = variant.fuse
    header = [f"// KernelFoundry heuristic proposer: task `{task_name}`, backend {backend}"]
    plan = gemm_plan(graph) if backend == "cpu" and variant.gemm else None
    cplan = conv_plan(graph) if backend == "cpu" and variant.gemm else None
    gplan = cuda_gemm_plan(graph) if backend == "cuda" and variant.gemm else None
    code = conv_family_unit(graph, variant, header) if backend == "cuda" and variant.gemm else None
    if code is not None:
        return KernelSource(
            language="cuda", code=code, entry_point="kf_forward", tunables=parse_tunables(code)
        )
    if gplan is not None:
        code = cuda_gemm_unit(graph, gplan, variant, header)
        return KernelSource(
            language="cuda", code=code, entry_point="kf_forward", tunables=parse_tunables(code)
        )
    if plan is not None or cplan is not None:
        if plan is not None:
            code = gemm_unit(graph, plan, variant, header, ISA_DISPATCH)
        else:
            assert cplan is not None
            code = conv_unit(graph, cplan, variant, header, ISA_DISPATCH)
        return KernelSource(
            language="cpp", code=code, entry_point="kf_forward", tunables=parse_tunables(code)
        )
    if means_lowered(variant):
        graph = lower_means(graph)
    if variant.fold:
        graph, _ = fold_affine_tails(graph)
    if backend == "cuda":
        graph = unbias_convs(graph)
    if fuse:
        graph = lower_attention(graph)
    if fuse:
        graph = fuse_pools(graph)
    parts = partition(graph, fuse, axis_leaves=backend == "cuda")
    if not parts:
        return _op_kernel_source(graph, backend, header)
    if backend == "cpu":
        code = CpuEmitter(graph, variant).unit(parts, header)
        language = "cpp"
    elif backend == "cuda":
        from kernelfoundry.generators.heuristic.cuda import CudaEmitter

        code = CudaEmitter(graph, variant).unit(parts, header)
        language = "cuda"
    else:
        raise UnsupportedGraph(f"no emitter for backend `{backend}`")
    nhwc = channels_last_source(graph, parts, backend) if variant.channels_last else None
    layout = frozenset({nhwc}) if nhwc else frozenset()
    ops: dict[str, tuple[OpKernel, str]] = {}
    if graph.generated_ops and not layout:
        # the glue alone would perform every op of the reference: its covered torch ops are generated too
        covered = [k for n in graph.nodes if n.name in graph.generated_ops if (k := op_kernel(graph, n))]
        ops = {k.node: (k, f"kf_op{i}") for i, k in enumerate(covered)}
        code += "\n" + op_entries(list(ops.values()), backend)
    to_nhwc = to_channels_last_entry(parts[0]) if backend == "cuda" and layout else None
    glue = glue_source(graph, parts, layout, ops=ops, to_nhwc=to_nhwc) if graph.has_torch_nodes else ""
    entry = parts[0].entry_point
    return KernelSource(
        language=language, code=code, entry_point=entry, glue=glue, tunables=parse_tunables(code)
    )


def _op_kernel_source(graph: Graph, backend: str, header: list[str]) -> KernelSource:
    """Nothing between the torch ops could be generated: generate the torch ops an op-kernel family
    covers (opkernels.py), so that the candidate launches a kernel of its own."""
    kept = [n for n in graph.nodes if n.kind in KEPT_IN_TORCH]
    found = [(n, op_kernel(graph, n)) for n in kept]
    kernels = [(k, f"kf_op{i}") for i, k in enumerate(k for _, k in found if k is not None)]
    if not kernels:
        ops = ", ".join(f"operator `{n.op}` at node `{n.name}`" for n in kept if n.fx_node is not None)
        raise UnsupportedGraph(f"the proposer does not support {ops or 'this reference'}")
    language = "cpp" if backend == "cpu" else "cuda"
    code = op_unit(kernels, backend, header)
    glue = glue_source(graph, [], ops={k.node: (k, entry) for k, entry in kernels})
    return KernelSource(
        language=language, code=code, entry_point=kernels[0][1], glue=glue, tunables=parse_tunables(code)
    )
