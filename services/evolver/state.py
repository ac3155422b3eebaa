"""The evolver's working state of one run, made of domain objects (no protobuf message is kept here).

`RunState` holds what a run in progress needs: the task and its settings, the engine, every candidate
(its source, what the engine knows of it, its evaluation result), the run's measurements and counters.
The coordinator (kernelfoundry.services.evolver.runs) changes it; resume (...evolver.resume) rebuilds
it from the lineage; the progress views (...evolver.progress) read it. `listeners` are the API's
subscriptions to the run's progress, not search state.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from dataclasses import dataclass, field

from kernelfoundry.domain.engine import EvolutionEngine
from kernelfoundry.domain.evaluation import CandidateInfo
from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.domain.outcomes import IMPROVING, OutcomeKind
from kernelfoundry.domain.results import EvaluationResult, RunConfig
from kernelfoundry.domain.speedup import Measurement
from kernelfoundry.domain.sweeps import ALL_SHAPES, SweepCampaign, SweepJob
from kernelfoundry.generators.accounting import RunUsage
from kernelfoundry.generators.base import MemberRecord
from kernelfoundry.tasks.model import Task
from kernelfoundry.v1 import run_pb2

RETIME_OPERATOR = "retime"  # the lineage operator of a best kernel's re-time (kernelfoundry.domain.speedup)


@dataclass
class CandidateState:
    info: CandidateInfo
    source: KernelSource
    created_at: float
    compiled: bool = False
    resolved: bool = False
    evaluation: EvaluationResult | None = None  # None until evaluated (and for a failed build)
    build_flags: tuple[str, ...] = ()
    generator: str = ""  # the generator (an ensemble's member) that wrote it; "" for sweep points


@dataclass
class RunState:
    run_id: str
    task: Task
    config: RunConfig
    build_target: str
    engine: EvolutionEngine
    reference_ops: int
    rng: random.Random
    sweeps: SweepCampaign
    sweep_jobs: dict[str, SweepJob] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)
    status: int = run_pb2.RUN_STATUS_RUNNING
    generation: int = 0
    pending_requests: set[str] = field(default_factory=set)
    handled_requests: set[str] = field(default_factory=set)
    candidates: dict[str, CandidateState] = field(default_factory=dict)
    source_hashes: dict[str, str] = field(default_factory=dict)  # source digest -> candidate id
    generated: int = 0
    # new candidates of the generation in flight (None until this coordinator issues one: after a
    # restore the last generation's count is unknown)
    generation_new: int | None = None
    compiled: int = 0
    correct: int = 0
    failed: int = 0
    best_id: str = ""
    best_speedup: float = 0.0
    best_path: str = ""
    message: str = ""
    finished_at: float | None = None
    listeners: list[asyncio.Queue[run_pb2.RunProgress]] = field(default_factory=list)
    # Every evaluation's timings, in arrival order: the run's speedup is computed from these alone.
    measurements: list[Measurement] = field(default_factory=list)
    # The re-time of the best kernel before the run ends (kernelfoundry.domain.speedup).
    retime_id: str = ""
    retime_done: bool = False
    finish_message: str = ""
    # Why generation requests failed (reason -> first message), to explain a run without candidates.
    generation_errors: dict[str, str] = field(default_factory=dict)
    # Tokens and cost of the answered generation requests, per generator (each request counted once).
    usage: RunUsage = field(default_factory=RunUsage)

    def time_to_beat(self, candidate_id: str) -> float:
        """The kernel time (ms) a candidate must come near to matter: its archive cell's elite's, from
        an evaluation of every shape; 0 (always timed in full) for a new cell, a sweep's single-shape
        variant or the best kernel's re-time."""
        state = self.candidates.get(candidate_id)
        if state is None or candidate_id == self.retime_id or state.info.shape != ALL_SHAPES:
            return 0.0
        elite = self.engine.islands.archive(state.info.island).elite(state.info.descriptors.cell)
        held = self.candidates.get(elite.candidate_id) if elite is not None else None
        if held is None or held.evaluation is None or held.info.shape != ALL_SHAPES:
            return 0.0
        return held.evaluation.runtime_ms

    def member_record(self) -> dict[str, MemberRecord]:
        """What became of each generator's candidates in this run (evaluated, correct, improved), as the
        engine classified their outcomes: the record an ensemble draws this run's next member by."""
        counts: dict[str, list[int]] = {}
        for state in self.candidates.values():
            outcome = self.engine.outcome(state.info.candidate_id) if state.generator else None
            if outcome is None:
                continue
            tally = counts.setdefault(state.generator, [0, 0, 0])
            tally[0] += 1
            tally[1] += outcome.kind is not OutcomeKind.FAILED
            tally[2] += outcome.kind in IMPROVING
        return {name: MemberRecord(*tally) for name, tally in counts.items()}

    @property
    def active(self) -> bool:
        return self.status == run_pb2.RUN_STATUS_RUNNING

    def unresolved(self) -> int:
        return sum(1 for c in self.candidates.values() if not c.resolved)


def source_digest(source: KernelSource) -> str:
    h = hashlib.sha256()
    h.update(source.language.encode())
    h.update(source.code.encode())
    h.update(source.glue.encode())
    h.update(repr(sorted(source.defines().items())).encode())
    return h.hexdigest()
