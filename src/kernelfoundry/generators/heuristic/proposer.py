"""The built-in heuristic proposer: the generator that always works, with no model behind it.

Seeds (no parent): the direct translation and the fused variant(s) of the reference graph. Mutations
(a parent written by this proposer carries its Variant): "fusion" toggles the fusion boundary,
"reduction" moves to the next reduction strategy (CPU: sums toggle atomic row splits), "tiling" toggles
shared-memory row caching (CUDA) / the channels-last conv tail or L1-tiled op-by-op pointwise (CPU;
INNER_TILE where neither applies), "vectorize" toggles SIMD/float4, "parallel" changes the parallel
decomposition, "retune" draws new tunable values. CPU GEMM family (the linear / conv itself generated as
a tiled / implicit GEMM, the tail its epilogue): a seed where it applies; "fusion" moves a fused parent
into it and a GEMM parent back to the library op; "tiling" / "reduction" of a GEMM parent move its cache
/ register blocking. CUDA GEMM family (cuda_gemm.py: the linear as a tiled SGEMM, a pointwise or sum /
mean tail as its epilogue): a seed after the fused and folded ones, reached by "fusion" of a fused
parent likewise; "tiling" of a GEMM parent moves its block tile (BM / BN), "reduction" its K slice (BK).
A parent with compile/mismatch feedback is repaired by falling back to the most conservative variant.
`hints` and `proposal_weights` steer which mutation is applied when the request names none.
Deterministic for a given request seed. Never compiles or evaluates.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Iterable

from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.generators.base import (
    MUTATIONS,
    GeneratedCandidate,
    GenerationRequest,
    GenerationResult,
    GenerationUsage,
)
from kernelfoundry.generators.heuristic.attention import lower_attention
from kernelfoundry.generators.heuristic.candidate import (
    descriptors_for,
    generate_source,
    lower_means,
    means_lowered,
)
from kernelfoundry.generators.heuristic.cpu_conv import conv_applies, conv_plan
from kernelfoundry.generators.heuristic.cpu_gemm import gemm_applies, gemm_plan
from kernelfoundry.generators.heuristic.cuda_conv import channels_last_operands_apply, nchw_leads
from kernelfoundry.generators.heuristic.cuda_conv_chain import conv_family_applies, cuda_conv_target
from kernelfoundry.generators.heuristic.cuda_gemm import cuda_gemm_applies, cuda_gemm_plan
from kernelfoundry.generators.heuristic.entry import reduce_range
from kernelfoundry.generators.heuristic.fold import fold_affine_tails
from kernelfoundry.generators.heuristic.graph import Graph, UnsupportedGraph, capture
from kernelfoundry.generators.heuristic.layout import channels_last_source
from kernelfoundry.generators.heuristic.plan import partition
from kernelfoundry.generators.heuristic.pools import fuse_pools
from kernelfoundry.generators.heuristic.scans import lower_scans
from kernelfoundry.generators.heuristic.settle import settle
from kernelfoundry.generators.heuristic.unbias import unbias_convs
from kernelfoundry.generators.heuristic.variant import Variant, parse_variant
from kernelfoundry.tasks.analysis import reference_op_count
from kernelfoundry.tasks.model import Task, TaskError

NAME = "heuristic"
_REDUCTIONS = ("block", "warp", "atomic")


def channels_last_applies(graph: Graph, backend: str = "cpu") -> bool:
    """Whether the graph is a conv with only a pointwise tail left that a channels-last tail can read:
    CPU, a Conv2d after folding its affine tail; CUDA, a 2-D or 3-D conv kept in cuDNN, its bias and
    other per-channel operands in the tail (unbias.py), the tail a pointwise chain, a reduction over
    the channels or a pooling window with its producers and consumers (pools.py)."""
    rewritten = fold_affine_tails(graph)[0] if backend == "cpu" else fuse_pools(unbias_convs(graph))
    try:
        parts = partition(rewritten, True, axis_leaves=backend == "cuda")
    except UnsupportedGraph:
        return False
    return channels_last_source(rewritten, parts, backend) is not None


CUDA_CHANNELS_LAST = "conv in channels-last, the tail reads NHWC and writes NCHW through a tile"


def seed_variants(graph: Graph, backend: str) -> list[tuple[Variant, str]]:
    """The archive seeds, the most promising first: the evolver's first generation asks for `population`
    seeds (often 2), the rest come only through mutations."""
    direct = (
        Variant(fuse=False, vectorize=False),
        "direct translation: one loop per op, intermediates materialised",
    )
    fused = (Variant(), "fused: one pass per materialised value, vectorised, broadcast-aware")
    folded = (Variant(fold=True), "per-channel affine tail folded into the heavy op's weights, rest fused")
    # the fused seeds generate attention as matmul, softmax, matmul (attention.py): their row-op seeds
    # apply to its softmax; the direct translation keeps the op kernel
    graph = lower_attention(graph)
    seeds = (
        cuda_seeds(graph, direct, fused, folded)
        if backend == "cuda"
        else cpu_seeds(graph, direct, fused, folded)
    )
    if means_reformulate(graph):
        # the fused seeds compute a mean over a conv's or a linear's output without it (conv_means.py,
        # feature_means.py): the first of them leads (ahead of a GEMM family the reformulation makes
        # moot), and the same seed with the conv or linear kept comes second: the reformulation's own
        # calls (tens of library calls) cost more than a small conv (level2/44 on the H200: 0.83 ms
        # against 0.74 kept; level2/42: 0.97 against 5.40)
        first = next(i for i, (v, _) in enumerate(seeds) if means_lowered(v) and not v.gemm)
        lead = seeds.pop(first)
        kept = (
            lead[0].with_(literal_means=True),
            "the conv / linear kept, the mean over its output after it",
        )
        seeds[0:0] = [lead, kept]
    return seeds


def means_reformulate(graph: Graph) -> bool:
    """Whether the fused seeds compute a mean over a conv's or a linear's output without it."""
    return lower_means(graph) is not graph


def cpu_seeds(
    graph: Graph, direct: tuple[Variant, str], fused: tuple[Variant, str], folded: tuple[Variant, str]
) -> list[tuple[Variant, str]]:
    """CPU seeds: the first generation (often two seeds) holds the fused seed and the generated GEMM
    family where one applies; the direct translation comes last. A linear's GEMM leads; a conv's
    implicit GEMM, which wins only at small sizes (tasks/), follows the fused seed.

    KernelBench level 2 at the bench's reduced sizes, one evaluation each, side by side with eager on
    a loaded host: 9_Matmul_Subtract_Multiply_ReLU GEMM 1.94x, fused 1.00x, direct 0.28x;
    4_Conv2d_Mish_Mish fused (torch's conv, the tail in one pass) 2.42x, implicit-GEMM conv 0.30x;
    52_Conv2d_Activation_BatchNorm fused 0.37x, implicit GEMM 0.23x, direct 0.10x."""
    seeds = [fused]
    plan = gemm_plan(graph)
    if plan is not None:
        what = "matmul" if plan.matmul else "linear"
        seeds.insert(
            0,
            (Variant(gemm=True), f"{what} in a tiled, register-blocked GEMM; the tail fused as its epilogue"),
        )
    conv = conv_plan(graph)
    if conv is not None:
        implicit = (
            Variant(gemm=True),
            "conv as a register-blocked implicit GEMM; the tail fused into its stores",
        )
        # a bare conv leads with it: the alternative is the one-loop-an-output-row op kernel
        seeds.insert(0 if conv.step is None else len(seeds), implicit)
    if fold_affine_tails(graph)[1]:
        seeds.append(folded)
    return [*seeds, direct]


def cuda_seeds(
    graph: Graph, direct: tuple[Variant, str], fused: tuple[Variant, str], folded: tuple[Variant, str]
) -> list[tuple[Variant, str]]:
    """CUDA seeds ordered by what won on the H200 suite (bench/results/superseded/in_process_harness/
    suite_cuda.txt, the removed in-process harness; bench/results/suite_cuda_stack.txt): rows held in
    registers for row ops (softmax, layer norm: one read, one write), a warp per short row for
    reductions, then the generic fused kernel; the direct translation, one launch per op and often
    100-1000x slower, comes last (a correct fallback, expensive to time). The GEMM family (SIMT, then
    3xTF32 tensor cores) follows the fused and folded seeds for a linear or matmul with a tail (cuBLAS,
    which those keep, runs them near the H200's peak) and leads for a bare matmul (1.00x eager on
    2_Standard); the conv family (one TF32 product, then 3xTF32) likewise follows the cuDNN-backed seeds
    for a conv with a tail and leads for a bare conv, whose alternative is the direct op kernel (0.10x)."""
    has_rows = any(n.kind in ("reduction", "rowop") for n in graph.nodes)
    has_rowop = any(n.kind == "rowop" for n in graph.nodes)
    has_softmax = any(n.op in ("softmax", "log_softmax") for n in graph.nodes)
    has_sum = any(n.op in ("sum", "mean") for n in graph.nodes)
    seeds: list[tuple[Variant, str]] = []
    if _few_long_sums(graph):
        # A loss or a global sum: a handful of rows of millions of elements. One block per row leaves
        # the GPU idle; rows split across blocks and combined with atomics fill it.
        seeds.append((Variant(reduction="atomic"), "fused, long rows split across blocks (atomics)"))
    if has_rowop:
        seeds.append(
            (
                Variant(cache_rows=True, online=has_softmax),
                "fused, rows held in registers: one read, one write",
            )
        )
    if has_rows:
        warp_rows = (Variant(row_warps=True), "fused, one warp per row for short rows (shuffle-only)")
        # rows of at most SHORT_ROW elements: a block per row (the register-held seed) leaves most of its
        # threads idle, a warp per row leads (level2/34's LayerNorm over 64 channels: 0.68x eager)
        seeds.insert(0 if _short_last_rows(graph) else len(seeds), warp_rows)
    seeds.append(fused)
    if fold_affine_tails(graph)[1]:
        seeds.append(folded)
    gemm = cuda_gemm_plan(graph)
    if gemm is not None:
        what = "matmul" if gemm.matmul else "linear"
        tail = ", tail as its epilogue" if gemm.step is not None else ""
        family = [
            (Variant(gemm=True), f"{what} as a tiled SGEMM (shared + register tiles){tail}"),
            (
                Variant(gemm=True, tensor_cores=True),
                f"{what} on tensor cores, 3xTF32 at float32 accuracy{tail}",
            ),
        ]
        # a bare matmul (or one triangle of it) leads with the family: the generic op kernel is one
        # thread per output row
        bare = gemm.matmul and gemm.step is None
        seeds = [*family, *seeds] if bare else [*seeds, *family]
    target = cuda_conv_target(graph)  # one conv, or a conv after a depthwise conv (cuda_conv_chain.py)
    if target is not None:
        conv_graph, conv = target
        tail = ", tail fused into its stores" if conv.step is not None else ""
        if conv_graph is not graph:
            tail = ", reading the depthwise conv's output (its shared-memory kernel, run first)" + tail
        tf32, exact = Variant(gemm=True, tensor_cores=True, tf32=True), Variant(gemm=True, tensor_cores=True)
        tf32_why = "conv as an implicit GEMM on tensor cores at TF32, cuDNN's own precision"
        exact_why = "conv as an implicit GEMM on tensor cores, 3xTF32 at float32 accuracy"
        family = [(tf32, tf32_why + tail), (exact, exact_why + tail)]
        if channels_last_operands_apply(conv_graph, conv):
            # 16-byte operand copies from an NHWC copy of the input lead, at each precision (where
            # cuDNN runs the conv in float32, eager's error 1e-6, only 3xTF32 passes: it comes second);
            # not where the copy costs more than it saves (nchw_leads: 1x1 convs, strided 1-D ones)
            nhwc = ", the input read in channels-last"
            channels_last = [
                (tf32.with_(channels_last=True), tf32_why + nhwc + tail),
                (exact.with_(channels_last=True), exact_why + nhwc + tail),
            ]
            nchw_first = nchw_leads(conv_graph, conv)
            family = [*family, *channels_last] if nchw_first else [*channels_last, *family]
        # a bare conv leads with the family: the alternative is the direct op kernel, one thread an
        # output; a conv with a tail keeps cuDNN's conv and the fused tail first
        seeds = [*family, *seeds] if conv.step is None else [*seeds, *family]
    if has_softmax:
        seeds.append((Variant(online=True), "fused, online softmax (max and sum in one pass)"))
    if has_rows:
        seeds.append((Variant(reduction="block"), "fused, block (shared-memory tree) reductions"))
    if has_sum and not _few_long_sums(graph):
        seeds.append((Variant(reduction="atomic"), "fused, row splits combined with atomics"))
    if not has_rows:
        seeds.append((Variant(vectorize=False), "fused, scalar grid-stride loops (no alignment needed)"))
    if channels_last_applies(graph, "cuda"):
        # torch.compile's layout: cuDNN's conv on channels-last tensors, the tail reading NHWC and writing
        # NCHW through a tile. Second, beside the NCHW seed: cuDNN runs float32 convs in NHWC and on NCHW
        # tensors converts around them (the H200 probe of bench/results/h200_2026-12-03_pipeline: on
        # level2/25 0.42 ms in and 1.13 ms out around a 1.55 ms conv), which this seed does not pay; it
        # lost to the NCHW seed on level2/4 (6.28 ms vs 5.97) only while torch's own NHWC copy of the input
        # (about three times torch.compile's) and cuDNN's bias pass were in it (since e6575b0, 9e78441)
        seeds.insert(1, (Variant(channels_last=True), CUDA_CHANNELS_LAST))
    return [*seeds, direct]


SHORT_ROW = 1024


def _short_last_rows(graph: Graph) -> bool:
    """Whether every row op (softmax, log-softmax, layer norm) normalises the trailing dims over rows of
    at most SHORT_ROW elements."""
    rowops = [n for n in graph.nodes if n.kind == "rowop"]
    for n in rowops:
        src = n.args[0] if n.args else None
        if not hasattr(src, "name") or src.name not in graph.shapes:
            return False
        shape = graph.shapes[src.name]
        try:
            d0, d1, _ = reduce_range(n, len(shape))
        except UnsupportedGraph:
            return False
        if d1 != len(shape) or math.prod(int(d) for d in shape[d0:d1]) > SHORT_ROW:
            return False
    return bool(rowops)


def _few_long_sums(graph: Graph) -> bool:
    """Whether a sum / mean reduces at least 2^20 elements into fewer than 1024 values."""

    def numel(shape: tuple[int, ...]) -> int:
        n = 1
        for d in shape:
            n *= d
        return n

    for n in graph.nodes:
        src = n.args[0] if n.args else None
        summed = n.kind == "reduction" and n.op in ("sum", "mean") and hasattr(src, "name")
        if summed and numel(n.shape) < 1024 and numel(graph.shapes[src.name]) >= 2**20:
            return True
    return False


def cpu_structural(graph: Graph, variant: Variant, mutation: str) -> tuple[Variant, str] | None:
    """CPU `tiling` / `reduction`: the structural alternative the graph admits, or None.

    tiling: conv tails toggle the channels-last conv + tile-transposing tail; other pointwise chains
    toggle cache-blocked op-by-op evaluation in L1 tile buffers. reduction: sums/means toggle row
    splits across threads combined with `omp atomic`.
    """
    if mutation == "tiling":
        if channels_last_applies(graph):
            on = not variant.channels_last
            why = "conv in channels-last (NHWC), tail applied while transposing through a local tile"
            return variant.with_(channels_last=on, fold=variant.fold or on), why if on else "NCHW conv tail"
        parts = partition(fold_affine_tails(graph)[0] if variant.fold else graph, True)
        if any(s.kind == "pointwise" for p in parts for s in p.steps):
            on = not variant.cache_rows
            why = "cache-blocked: each fused op a vectorised loop over L1 tile buffers"
            return variant.with_(cache_rows=on, fuse=True), why if on else "untiled fused loops"
        return None
    if any(n.op in ("sum", "mean") and n.kind == "reduction" for n in graph.nodes):
        nxt = "warp" if variant.reduction == "atomic" else "atomic"
        why = "row splits across threads, partial sums combined with omp atomic"
        return variant.with_(reduction=nxt), why if nxt == "atomic" else "one thread per row, SIMD reduction"
    return None


_GEMM_TILES = {
    "cpu": {"tiling": ("MC", "KC"), "reduction": ("MR", "NV")},
    "cuda": {"tiling": ("BM", "BN"), "reduction": ("BK",)},
}
_GEMM_MOVES = ("fusion", "tiling", "reduction")


def gemm_mutation(
    graph: Graph, task: str, variant: Variant, mutation: str, request: GenerationRequest, rng: random.Random
) -> tuple[Variant, str, KernelSource]:
    """Moves into and inside the GEMM family. `fusion` of a fused parent fuses the linear too (tiled
    GEMM, tail as its epilogue), `fusion` of a GEMM parent hands the linear back to torch (the tail stays
    fused). CPU: `tiling` moves one cache block (MC rows / KC slice), `reduction` the register block
    (MR x NV accumulators); CUDA: `tiling` the block tile (BM / BN, which sets the register tile),
    `reduction` the K slice per barrier (BK); each to another declared value."""
    assert request.parent is not None
    parent = request.parent.source
    if mutation == "fusion":
        on = not variant.gemm
        # the CUDA conv family runs on tensor cores only
        tc = on and request.backend == "cuda" and conv_family_applies(graph)
        changed = variant.with_(gemm=on, tensor_cores=tc, tf32=tc)
        why = "linear fused into a tiled GEMM, tail as its epilogue" if on else "linear back in torch"
        return changed, why, HeuristicGenerator._keep_params(graph, task, changed, request)
    declared = {t.name: t for t in parent.tunables}
    tiles = _GEMM_TILES[request.backend]
    names = [n for n in tiles[mutation] if n in declared] or [n for n in tiles["reduction"] if n in declared]
    if not names:
        return variant, "new tile sizes", parent
    name = rng.choice(names)
    current = parent.params.get(name, declared[name].default)
    choices = [v for v in declared[name].values if v != current] or list(declared[name].values)
    params = {**parent.params, name: rng.choice(choices)}
    src = KernelSource(parent.language, parent.code, parent.entry_point, parent.glue, parent.tunables, params)
    return variant, f"GEMM blocking {name}={params[name]}", src


def mutate(variant: Variant, mutation: str, backend: str, rng: random.Random) -> tuple[Variant, str]:
    match mutation:
        case "fusion":
            return variant.with_(fuse=not variant.fuse), (
                "moved the fusion boundary: "
                + ("fused the chain" if not variant.fuse else "materialised every op")
            )
        case "reduction":
            if backend == "cpu":
                return variant.with_(online=not variant.online), "changed the reduction formulation"
            nxt = _REDUCTIONS[(_REDUCTIONS.index(variant.reduction) + 1) % len(_REDUCTIONS)]
            return variant.with_(
                reduction=nxt, online=not variant.online if nxt == "block" else variant.online
            ), (f"reduction strategy {variant.reduction} -> {nxt}")
        case "tiling":
            return variant.with_(cache_rows=not variant.cache_rows), "toggled caching rows in on-chip memory"
        case "vectorize":
            return variant.with_(vectorize=not variant.vectorize), "toggled vectorised access"
        case "parallel":
            return variant.with_(par_rows=not variant.par_rows), "changed the parallel decomposition"
    return variant, "new tunable values"


def retune(source: KernelSource, rng: random.Random) -> KernelSource:
    params = {t.name: rng.choice(t.values) for t in source.tunables}
    return KernelSource(
        source.language, source.code, source.entry_point, source.glue, source.tunables, params
    )


def _pick_mutation(request: GenerationRequest, rng: random.Random) -> str:
    if request.mutation:
        return request.mutation
    weights = {m: 1.0 for m in MUTATIONS}
    for m, w in request.proposal_weights.items():
        if m in weights:
            weights[m] = max(0.0, float(w))
    text = " ".join(request.hints).lower() + " " + " ".join(request.guidance.values()).lower()
    for m in MUTATIONS:
        if m in text or (m == "vectorize" and "vector" in text) or (m == "fusion" and "fuse" in text):
            weights[m] += 2.0
    total = sum(weights.values())
    if total <= 0:
        return "retune"
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def source_or_fallback(
    graph: Graph, task: str, backend: str, variant: Variant
) -> tuple[KernelSource, Variant, str]:
    """The variant's source, or the fused default's where the emitters cannot write that variant for
    this graph (the settled graph always generates the default); the third item says why."""
    try:
        return generate_source(graph, task, backend, variant), variant, ""
    except Exception as exc:  # an emitter limit for one strategy: fall back, keep the request alive
        note = f"fell back to the fused variant: {type(exc).__name__}: {exc}"
        return generate_source(graph, task, backend, Variant()), Variant(), note


class HeuristicGenerator:
    """Generator implementation; `generate` is async for the interface, the work is synchronous."""

    name = NAME

    # Captured graphs are kept per task text, which clients choose: a bounded, least-recently-used set.
    MAX_GRAPHS = 32

    def __init__(self) -> None:
        self._graphs: OrderedDict[tuple[str, str], Graph] = OrderedDict()
        self._settled: OrderedDict[tuple[str, str, str], Graph] = OrderedDict()

    def graph(self, task: Task) -> Graph:
        key = (task.name, task.reference_source)
        if key in self._graphs:
            self._graphs.move_to_end(key)
        else:
            # scan idioms (a flip, narrow and cat, or a mask around a cumsum) as one scan: scans.py
            self._graphs[key] = lower_scans(capture(task))
            while len(self._graphs) > self.MAX_GRAPHS:
                self._graphs.popitem(last=False)
        return self._graphs[key]

    def settled(self, task: Task, backend: str) -> Graph:
        """The task's graph settled for `backend` (settle.py: what no emitter writes stays in torch)."""
        key = (task.name, task.reference_source, backend)
        if key in self._settled:
            self._settled.move_to_end(key)
        else:
            self._settled[key] = settle(self.graph(task), task.name, backend, task.reference_source)
            while len(self._settled) > self.MAX_GRAPHS:
                self._settled.popitem(last=False)
        return self._settled[key]

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        return self.generate_sync(request)

    def generate_sync(self, request: GenerationRequest) -> GenerationResult:
        try:
            graph = self.settled(request.task, request.backend)
            candidates = list(self._propose(graph, request))
        except TaskError as exc:
            return GenerationResult((), GenerationUsage(), NAME, error=exc.reason, message=exc.message)
        except Exception as exc:  # a proposer bug must cost one request, never the llm service
            message = f"the proposer failed on `{request.task.name}`: {type(exc).__name__}: {exc}"
            return GenerationResult((), GenerationUsage(), NAME, error="generator_error", message=message)
        if not candidates:
            message = f"the proposer generated no candidate for `{request.task.name}`"
            return GenerationResult((), GenerationUsage(), NAME, error="unsupported", message=message)
        return GenerationResult(tuple(candidates[: request.count]), GenerationUsage(), NAME)

    def _propose(self, graph: Graph, request: GenerationRequest) -> Iterable[GeneratedCandidate]:
        rng = random.Random(f"{request.request_id}:{request.seed}")
        backend = request.backend
        task = request.task.name
        ref_ops = reference_op_count(request.task.reference_source)

        def candidate(
            variant: Variant, mutation: str, why: str, src: KernelSource | None = None
        ) -> GeneratedCandidate:
            if src is None:
                src, variant, fallback = source_or_fallback(graph, task, backend, variant)
                why = f"{why} ({fallback})" if fallback else why
            return GeneratedCandidate(
                src, descriptors_for(graph, backend, variant, src, ref_ops), mutation, why
            )

        if request.parent is None:
            seen: set[tuple[str, str]] = set()
            for variant, why in seed_variants(graph, backend):
                seed = candidate(variant, "seed", why)
                # strategies that do not apply to a graph (an op-kernel unit has no fusion to vary)
                # give the same unit: hand it out once
                if (seed.source.code, seed.source.glue) not in seen:
                    seen.add((seed.source.code, seed.source.glue))
                    yield seed
            return
        parent_variant = parse_variant(request.parent.source.code) or Variant()
        if request.repair or request.parent.feedback:
            # The conservative fallback: unvectorised, block reductions, no row caching.
            safe = Variant(fuse=parent_variant.fuse, vectorize=False, reduction="block")
            reason = request.parent.feedback.strip().splitlines()[0] if request.parent.feedback else "repair"
            yield candidate(safe, "repair", f"repair after: {reason}")
            return
        for _ in range(request.count):
            mutation = _pick_mutation(request, rng)
            family = (
                cuda_gemm_applies(graph) or conv_family_applies(graph)
                if backend == "cuda"
                else backend == "cpu" and (gemm_applies(graph) or conv_applies(graph))
            )
            to_gemm = mutation == "fusion" and parent_variant.fuse and not parent_variant.fold and family
            if family and (to_gemm or (parent_variant.gemm and mutation in _GEMM_MOVES)):
                variant, why, src = gemm_mutation(graph, task, parent_variant, mutation, request, rng)
                yield candidate(variant, mutation, why, src)
                continue
            if mutation == "reduction" and parent_variant.fuse and means_reformulate(graph):
                # the reduction's formulation: the mean computed without the conv / linear, or after it
                on = not parent_variant.literal_means
                variant = parent_variant.with_(literal_means=on)
                why = (
                    "conv / linear kept, the mean after it"
                    if on
                    else "the mean computed without the conv / linear"
                )
                yield candidate(variant, mutation, why, self._keep_params(graph, task, variant, request))
                continue
            if backend == "cuda" and mutation == "tiling" and channels_last_applies(graph, "cuda"):
                on = not parent_variant.channels_last
                variant = parent_variant.with_(channels_last=on, fuse=True)  # one fused tail step
                why = CUDA_CHANNELS_LAST if on else "conv in NCHW, the tail fused after it"
                yield candidate(variant, mutation, why, self._keep_params(graph, task, variant, request))
                continue
            if backend == "cpu" and mutation in ("reduction", "tiling"):
                changed = cpu_structural(graph, parent_variant, mutation)
                if changed is not None:
                    variant, why = changed
                    yield candidate(variant, mutation, why, self._keep_params(graph, task, variant, request))
                    continue
                # nothing structural to change: the column tile of middle-dimension reductions
                tiles = [
                    v for t in request.parent.source.tunables if t.name == "INNER_TILE" for v in t.values
                ]
                current = request.parent.source.params.get("INNER_TILE")
                choices = [v for v in tiles if v != current] or tiles
                params = (
                    {**request.parent.source.params, "INNER_TILE": rng.choice(choices)} if choices else {}
                )
                parent = request.parent.source
                src = KernelSource(
                    parent.language, parent.code, parent.entry_point, parent.glue, parent.tunables, params
                )
                yield candidate(parent_variant, mutation, f"reduction tile {params}", src)
                continue
            if mutation == "retune":
                src = retune(request.parent.source, rng)
                yield candidate(parent_variant, mutation, f"retuned {dict(src.params)}", src)
                continue
            variant, why = mutate(parent_variant, mutation, backend, rng)
            yield candidate(variant, mutation, why, self._keep_params(graph, task, variant, request))

    @staticmethod
    def _keep_params(graph: Graph, task: str, variant: Variant, request: GenerationRequest) -> KernelSource:
        assert request.parent is not None
        src, _, _ = source_or_fallback(graph, task, request.backend, variant)
        if request.parent.source.params:
            known = {t.name for t in src.tunables}
            kept = {k: v for k, v in request.parent.source.params.items() if k in known}
            src = KernelSource(src.language, src.code, src.entry_point, src.glue, src.tunables, kept)
        return src
