"""Behavioural descriptors: the axes of the MAP-Elites archive, four levels each, and their classifier.

memory      0 scalar/strided/uncoalesced, 1 coalesced or vectorized, 2 shared/local-memory tiling,
            3 multi-level hierarchy
algorithm   0 direct translation, 1 fused operations, 2 reformulated algorithm, 3 asymptotically better
parallelism 0 no sync, 1 block barriers, 2 warp/sub-group primitives, 3 global coordination (atomics)

The axes are data (`DESCRIPTOR_AXES`): each `Axis` names itself (the `Descriptors` field and the
protobuf field of kernelfoundry.v1.Descriptors), says what each level means (the phrase hints and
intents use), gives the short words tables show per backend, and names the mutation operators that
move a kernel along it. Everything else (archive cells, transitions, operators, the protobuf codec,
the lineage codec, the store, the CLI) iterates these. Adding an axis: an `Axis` entry and a
`Descriptors` field here, a field in protos/kernelfoundry/v1/kernel.proto, and rules in `_RULES` below
(the classifier); see docs/architecture.md.

`classify(source, reference_op_count)` assigns the levels by a static analysis of the kernel source
(CUDA and C++/OpenMP): each axis takes the highest level for which the code shows evidence, and every
piece of evidence is reported as a short string. Comments and string literals are stripped first, so a
comment naming `__shared__` proves nothing. The generator's self-report is recorded beside the result;
the analysis decides. The rules are deliberately simple and documented in docs/evolution.md.

This module must never perform I/O or compile anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields

from kernelfoundry.domain.kernel import KernelSource

LEVELS = 4


@dataclass(frozen=True)
class Axis:
    """One behavioural axis of the archive."""

    name: str  # the Descriptors field and the protobuf field
    levels: tuple[str, ...]  # what each level means, as a phrase ("move the memory strategy to ...")
    words: Mapping[
        str, tuple[str, ...]
    ]  # short words per level for tables, by backend ("cuda" is the default)
    operators: tuple[str, ...]  # the mutation operators that move a kernel along this axis

    def __post_init__(self) -> None:
        for what in (self.levels, *self.words.values()):
            if len(what) != LEVELS:
                raise ValueError(f"axis {self.name}: {len(what)} level names for {LEVELS} levels")
        if "cuda" not in self.words:
            raise ValueError(f"axis {self.name}: no default (cuda) words")


DESCRIPTOR_AXES: tuple[Axis, ...] = (
    Axis(
        "memory",
        levels=(
            "scalar/strided access",
            "coalesced or vectorized access",
            "shared/local-memory tiling",
            "a multi-level memory hierarchy",
        ),
        words={
            "cuda": ("scalar", "coalesced", "shared-memory tiles", "multi-level"),
            "cpu": ("scalar", "SIMD / contiguous", "cache blocking", "multi-level blocking"),
        },
        operators=("vectorize", "tiling"),
    ),
    Axis(
        "algorithm",
        levels=(
            "a direct translation",
            "fused operations",
            "a reformulated algorithm",
            "an asymptotically better algorithm",
        ),
        words={
            "cuda": ("direct", "fused", "reformulated", "asymptotic"),
            "cpu": ("direct", "fused", "reformulated", "asymptotic"),
        },
        operators=("fusion", "reduction"),
    ),
    Axis(
        "parallelism",
        levels=(
            "no synchronisation",
            "block barriers",
            "warp/sub-group primitives",
            "global coordination (atomics)",
        ),
        words={
            "cuda": ("no sync", "block barriers", "warp primitives", "atomics"),
            "cpu": ("independent threads", "thread barriers", "reduction clauses", "atomics / critical"),
        },
        operators=("parallel", "reduction"),
    ),
)
AXES: tuple[str, ...] = tuple(axis.name for axis in DESCRIPTOR_AXES)
CELL_COUNT = LEVELS ** len(AXES)

Cell = tuple[int, ...]  # one level per axis, in the order of AXES


def axis_named(name: str) -> Axis:
    for axis in DESCRIPTOR_AXES:
        if axis.name == name:
            return axis
    raise KeyError(f"no descriptor axis `{name}` (axes: {', '.join(AXES)})")


@dataclass(frozen=True, order=True)
class Descriptors:
    """One level per axis; the fields are the names in DESCRIPTOR_AXES, in the same order."""

    memory: int = 0
    algorithm: int = 0
    parallelism: int = 0

    def __post_init__(self) -> None:
        for axis in AXES:
            level = getattr(self, axis)
            if not 0 <= level < LEVELS:
                raise ValueError(f"descriptor {axis}={level} outside 0..{LEVELS - 1}")

    @property
    def cell(self) -> Cell:
        return tuple(getattr(self, axis) for axis in AXES)

    def as_dict(self) -> dict[str, int]:
        return {axis: getattr(self, axis) for axis in AXES}

    @classmethod
    def from_cell(cls, cell: Iterable[int]) -> Descriptors:
        """From one level per axis, in the order of AXES; ValueError for a wrong count or level."""
        levels = tuple(int(v) for v in cell)
        if len(levels) != len(AXES):
            raise ValueError(f"a cell has {len(AXES)} levels ({', '.join(AXES)}), got {len(levels)}")
        return cls(*levels)

    @classmethod
    def from_levels(cls, levels: Mapping[str, int] | object, *, missing: int | None = None) -> Descriptors:
        """From anything with one level per axis name: a mapping (its keys) or an object (its attributes,
        e.g. a kernelfoundry.v1.Descriptors message). An absent axis is `missing`, or a KeyError."""
        values: dict[str, int] = {}
        for axis in AXES:
            value = (
                levels.get(axis, missing) if isinstance(levels, Mapping) else getattr(levels, axis, missing)
            )
            if value is None:
                raise KeyError(f"descriptor level `{axis}` missing")
            values[axis] = int(value)
        return cls(**values)


if tuple(f.name for f in fields(Descriptors)) != AXES:  # the one place both are spelled out
    raise RuntimeError(
        f"Descriptors fields {[f.name for f in fields(Descriptors)]} differ from the axes {AXES}"
    )


@dataclass(frozen=True)
class Classification:
    descriptors: Descriptors
    evidence: tuple[str, ...] = ()
    reported: Descriptors | None = None  # the generator's self-report, kept for comparison
    disagreements: tuple[str, ...] = field(default=())  # axes where the self-report differs

    @property
    def agrees(self) -> bool:
        return not self.disagreements


_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.DOTALL)


_ASM_OPEN = re.compile(r"\basm\s*(?:volatile\s*|__volatile__\s*)?\(\s*$")


def strip_comments(code: str) -> str:
    """The code without comments and string/char literals (newlines kept so lines still line up). The
    instruction template of an inline `asm(...)` (its first string literals, adjacent ones joined) is
    code and stays, without its quotes."""
    kept_until = -1

    def blank(m: re.Match[str]) -> str:
        nonlocal kept_until
        text = m.group(0)
        if text.startswith(("//", "/*")):
            return "\n" * text.count("\n")
        start = m.start()
        continued = kept_until >= 0 and not code[kept_until:start].strip()
        if text.startswith('"') and (continued or _ASM_OPEN.search(code, max(0, start - 40), start)):
            kept_until = m.end()
            return " " + text[1:-1] + " "
        return '""'

    return _COMMENT_OR_STRING.sub(blank, code)


def _rule(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.MULTILINE)


# (axis, level, evidence text, pattern): every matching rule is evidence; the highest level per axis wins.
_RULES: tuple[tuple[str, int, str, re.Pattern[str]], ...] = (
    # memory 1: coalesced or vectorized access
    (
        "memory",
        1,
        "vector loads/types (float4/float2/half2/int4)",
        _rule(r"\b(?:float[24]|double2|half2|__half2|__nv_bfloat162|int[24]|uint[24])\b"),
    ),
    ("memory", 1, "read-only cached loads (__ldg)", _rule(r"\b__ldg\s*\(")),
    (
        "memory",
        1,
        "SIMD pragma (#pragma omp simd / GCC ivdep)",
        _rule(r"#\s*pragma\s+(?:omp\s+(?:parallel\s+for\s+)?simd|GCC\s+ivdep|ivdep)\b"),
    ),
    (
        "memory",
        1,
        "SIMD intrinsics (__m128/__m256/__m512, _mm*_)",
        _rule(r"\b(?:__m(?:128|256|512)[di]?|_mm(?:256|512)?_\w+)\b"),
    ),
    (
        "memory",
        1,
        "coalesced thread indexing (blockIdx * blockDim + threadIdx.x)",
        _rule(
            r"blockIdx\.x\s*\*\s*blockDim\.x\s*\+\s*threadIdx\.x|threadIdx\.x\s*\+\s*blockIdx\.x\s*\*\s*blockDim\.x"
        ),
    ),
    # memory 2: shared/local-memory tiling
    ("memory", 2, "shared memory (__shared__)", _rule(r"\b__shared__\b")),
    (
        "memory",
        2,
        "tiled loop stepping by a tile size",
        # a tile or cache-block size (TILE*, *_tile, BLOCK_M/N/K, BM/BN/BK, BLIS-style MC/NC/KC), not a
        # block-stride loop (`i += BLOCK_SIZE` / `blockDim.x`), which walks memory without reuse
        _rule(r"\+=\s*(?:\w*TILE\w*|\w*[Tt]ile\w*|BLOCK_[MNK]\w*|B[MNK]|BLK_?[MNK]?\w*|[MNK]C)\b"),
    ),
    (
        "memory",
        2,
        "local array used as a tile",
        _rule(
            r"^\s*(?:alignas\(\d+\)\s*)?(?:float|double|half|__half|int|__nv_bfloat16)\s+\w*(?:tile|blk|buf|Tile|Blk|Buf|panel|pack)\w*\s*\["
        ),
    ),
    # memory 3: multi-level hierarchy
    (
        "memory",
        3,
        "asynchronous copies into shared memory (cp.async / memcpy_async / TMA)",
        _rule(r"cp\.async|__pipeline_memcpy_async|memcpy_async|cuTensorMap|cp\.async\.bulk"),
    ),
    ("memory", 3, "double-buffered shared memory", _rule(r"__shared__[^;]*\w+\s*\[\s*2\s*\]")),
    # algorithm 2: reformulated algorithm
    (
        "algorithm",
        2,
        "online/streaming reformulation (running max/sum, Welford)",
        _rule(r"\b(?:running_(?:max|sum|mean)|online_\w+|welford\w*|m_new|m_prev|M2)\b"),
    ),
    (
        "algorithm",
        2,
        "tensor-core formulation (wmma / mma.sync)",
        _rule(r"\bwmma::|mma\.sync|\bmma_sync\s*\("),
    ),
    (
        "algorithm",
        2,
        "im2col / split-K / Winograd reformulation",
        _rule(r"\b(?:im2col\w*|split_?k\w*|SPLIT_?K\w*|winograd\w*)\b"),
    ),
    # algorithm 3: asymptotically better
    (
        "algorithm",
        3,
        "asymptotically better algorithm (FFT / Strassen / scan)",
        _rule(r"\b(?:fft\w*|FFT\w*|butterfly\w*|strassen\w*|Strassen\w*)\b"),
    ),
    # parallelism 1: block barriers
    ("parallelism", 1, "block barrier (__syncthreads)", _rule(r"\b__syncthreads(?:_count|_and|_or)?\s*\(")),
    ("parallelism", 1, "OpenMP barrier", _rule(r"#\s*pragma\s+omp\s+barrier\b")),
    (
        "parallelism",
        1,
        "cooperative-groups block sync",
        _rule(r"\bthis_thread_block\s*\(\s*\)|block\.sync\s*\("),
    ),
    # parallelism 2: warp/sub-group primitives
    ("parallelism", 2, "warp shuffles (__shfl_*_sync)", _rule(r"\b__shfl_(?:xor_|up_|down_)?sync\s*\(")),
    (
        "parallelism",
        2,
        "warp vote/reduce intrinsics",
        _rule(
            r"\b(?:__ballot_sync|__any_sync|__all_sync|__reduce_\w+_sync|__match_\w+_sync|__syncwarp)\s*\("
        ),
    ),
    (
        "parallelism",
        2,
        "warp-wide matrix multiply-accumulate (mma.sync / wmma)",
        _rule(r"\bmma\.sync\.aligned\b|\bwmma::mma_sync\s*\("),
    ),
    (
        "parallelism",
        2,
        "cooperative-groups tiles (tiled_partition / cg::reduce)",
        _rule(r"\btiled_partition\b|\bcg::reduce\b|cooperative_groups::reduce\b"),
    ),
    (
        "parallelism",
        2,
        "OpenMP reduction clause (sub-group combine)",
        _rule(r"#\s*pragma\s+omp\b[^\n]*\breduction\s*\("),
    ),
    # parallelism 3: global coordination
    ("parallelism", 3, "atomics (atomicAdd/atomicMax/atomicCAS...)", _rule(r"\batomic[A-Z]\w*\s*\(")),
    ("parallelism", 3, "OpenMP atomic/critical", _rule(r"#\s*pragma\s+omp\s+(?:atomic|critical)\b")),
    ("parallelism", 3, "std::atomic", _rule(r"\bstd::atomic\b")),
    ("parallelism", 3, "grid-wide synchronisation", _rule(r"\bthis_grid\s*\(\s*\)|grid\.sync\s*\(")),
)

# Families of math operations, counted to judge fusion against the reference's op count.
_MATH_OPS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("exp", _rule(r"\b(?:__)?expf?\s*\(|\bexp2f?\s*\(|_mm\d*_exp")),
    ("log", _rule(r"\b(?:__)?logf?\s*\(|\blog1pf?\s*\(|\blog2f?\s*\(")),
    ("tanh", _rule(r"\btanhf?\s*\(")),
    ("erf", _rule(r"\berff?\s*\(|\berfcf?\s*\(")),
    ("sqrt", _rule(r"\b(?:r?sqrtf?|__fsqrt_\w+|__frsqrt_rn)\s*\(|_mm\d*_r?sqrt")),
    ("max/relu", _rule(r"\bf?maxf?\s*\(|std::max\s*\(|_mm\d*_max_")),
    ("min/clamp", _rule(r"\bf?minf?\s*\(|std::min\s*\(|std::clamp\s*\(")),
    (
        "multiply-accumulate",
        _rule(
            r"\+=\s*[^;]*\w\s*\[[^;]*\]\s*\*|\*\s*\w+\s*\[[^;]*\]\s*;|\bfmaf?\s*\(|__fmaf_\w+|_mm\d*_fmadd_"
        ),
    ),
    ("reduction", _rule(r"\b(?:sum|acc|total|partial)\w*\s*\+=")),
)

_KERNEL_FUNCTION = re.compile(r"\b__global__\b")

# A local accumulator array (registers on a GPU, a micro-kernel's registers on a CPU): on top of a
# shared-memory or cache tile it makes a second level of the hierarchy.
_REGISTER_TILE = _rule(
    r"^\s*(?:float[24]?|double|half2?|__half2?)\s+(?:acc|accum|c_?reg|reg|frag|sums?|c_local|out_reg|res)\w*"
    r"\s*\[\s*\w+\s*\]"
)


def _math_ops(code: str) -> list[str]:
    return [name for name, pattern in _MATH_OPS if pattern.search(code)]


def classify(
    source: KernelSource, reference_op_count: int, reported: Descriptors | None = None
) -> Classification:
    """Assign the descriptor levels from evidence in `source` (the analysis wins over `reported`).

    `reference_op_count` is the number of distinct operations in the reference computation; a kernel
    that covers two or more of them in fewer launches than the reference has ops counts as fused.
    """
    code = strip_comments(source.code)
    levels = dict.fromkeys(AXES, 0)
    evidence: list[str] = []
    for axis, level, text, pattern in _RULES:
        if pattern.search(code):
            evidence.append(f"{axis} {level}: {text}")
            levels[axis] = max(levels[axis], level)
    if levels["memory"] == 2 and _REGISTER_TILE.search(code):
        evidence.append("memory 3: register accumulator tile on top of a shared/cache tile")
        levels["memory"] = 3
    ops = _math_ops(code)
    launches = max(1, len(_KERNEL_FUNCTION.findall(code))) if source.language == "cuda" else 1
    if reference_op_count >= 2 and len(ops) >= 2 and launches < reference_op_count:
        evidence.append(
            f"algorithm 1: fuses {len(ops)} math op families ({', '.join(ops)}) in {launches} kernel(s)"
            f" for {reference_op_count} reference ops"
        )
        levels["algorithm"] = max(levels["algorithm"], 1)
    descriptors = Descriptors(**levels)
    disagreements: tuple[str, ...] = ()
    if reported is not None:
        disagreements = tuple(
            f"{axis}: reported {getattr(reported, axis)}, analysed {levels[axis]}"
            for axis in AXES
            if getattr(reported, axis) != levels[axis]
        )
    return Classification(descriptors, tuple(evidence), reported, disagreements)
