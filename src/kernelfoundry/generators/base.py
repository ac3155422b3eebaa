"""The generator interface: what a kernel generator is asked and what it answers.

Provider-neutral, pure dataclasses: the built-in heuristic proposer and every LLM adapter implement
`Generator` with these types. Must never import a transport, an HTTP client or torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Protocol, runtime_checkable

from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.tasks.model import Task

Backend = Literal["cpu", "cuda"]

# The mutation operators a request may name; `None` in a request means "seed the archive".
MUTATIONS: tuple[str, ...] = ("fusion", "reduction", "tiling", "vectorize", "parallel", "retune")

_EMPTY: Mapping[str, str] = MappingProxyType({})
_EMPTY_WEIGHTS: Mapping[str, float] = MappingProxyType({})


@dataclass(frozen=True)
class ParentKernel:
    """A kernel to mutate or repair, with what its evaluation said about it."""

    source: KernelSource
    descriptors: Descriptors
    speedup: float | None
    runtime_ms: float | None
    feedback: str = ""  # compile log or mismatch report, for repair
    eager_ms: float | None = None  # the run's eager time (pooled median): what runtime_ms compares with
    compile_ms: float | None = None  # torch.compile's likewise, when measured
    roofline_fraction: float | None = None  # the roofline floor over runtime_ms (1.0: at the floor)
    bound: str = ""  # what bounds that floor: "memory" (bytes / bandwidth) or "compute" (FLOPs / peak)


@dataclass(frozen=True)
class Inspiration:
    """The elite of another archive cell: an example of what worked there."""

    source: KernelSource
    descriptors: Descriptors
    speedup: float | None
    runtime_ms: float | None


@dataclass(frozen=True)
class MemberRecord:
    """What became of one generator's candidates in a run: the evidence an ensemble weighs it by."""

    evaluated: int = 0
    correct: int = 0
    improvements: int = 0  # archive outcomes improvement, new_cell or elite_replaced

    def __post_init__(self) -> None:
        if (
            min(self.evaluated, self.correct, self.improvements) < 0
            or max(self.correct, self.improvements) > self.evaluated
        ):
            raise ValueError(
                f"a member record counts at most its evaluations as correct or improved, none below 0:"
                f" evaluated {self.evaluated}, correct {self.correct}, improvements {self.improvements}"
            )

    @property
    def correct_rate(self) -> float:
        return (self.correct + 1) / (self.evaluated + 2)  # Laplace-smoothed: no record is 1/2

    @property
    def improvement_rate(self) -> float:
        return (self.improvements + 1) / (self.evaluated + 4)


_NO_RECORD: Mapping[str, MemberRecord] = MappingProxyType({})


@dataclass(frozen=True)
class GenerationRequest:
    request_id: str
    task: Task
    backend: Backend
    parent: ParentKernel | None = None
    mutation: str | None = None  # one of MUTATIONS; None with no parent: seed the archive
    hints: tuple[str, ...] = ()
    guidance: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    proposal_weights: Mapping[str, float] = field(default_factory=lambda: _EMPTY_WEIGHTS)
    count: int = 1
    seed: int = 0
    repair: bool = False
    inspirations: tuple[Inspiration, ...] = ()  # elites of other cells, fastest first
    hardware: str = ""  # the run's execution hardware, the device: e.g. cuda.h200, cpu.x86_64
    build_target: str = ""  # what its kernels are compiled for: e.g. cuda.sm90
    # the run's record per generator that wrote its candidates (an ensemble's members), from the evolver
    member_record: Mapping[str, MemberRecord] = field(default_factory=lambda: _NO_RECORD)

    def __post_init__(self) -> None:
        if self.mutation is not None and self.mutation not in MUTATIONS:
            raise ValueError(f"unknown mutation `{self.mutation}`; expected one of {', '.join(MUTATIONS)}")
        if self.count < 1:
            raise ValueError(f"count must be at least 1, got {self.count}")
        if self.repair and self.parent is None:
            raise ValueError("a repair request needs the parent kernel to repair")


@dataclass(frozen=True)
class GeneratedCandidate:
    source: KernelSource
    strategy: Descriptors  # self-reported; the static analysis has the last word
    mutation: str  # "seed" for archive seeds, else the operator applied
    rationale: str


@dataclass(frozen=True)
class GenerationUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True)
class GenerationResult:
    candidates: tuple[GeneratedCandidate, ...]
    usage: GenerationUsage
    generator: str
    error: str = ""  # reason code when no candidate could be produced (e.g. `unsupported`)
    message: str = ""  # what was wrong, for the error


@runtime_checkable
class Generator(Protocol):
    name: str

    async def generate(self, request: GenerationRequest) -> GenerationResult: ...
