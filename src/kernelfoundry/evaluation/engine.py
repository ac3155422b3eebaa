"""The judge's evaluation of one request: the trusted side of the sealed evaluation.

Runs in the judge process (judge.py). It builds inputs, computes the higher-precision reference, the
eager and torch.compile baselines, the comparisons and the verdict; it never loads a unit or executes
glue. The candidate runs in a fresh runner process (runner.py) that the judge commands over a channel
and observes from outside (runner_client.py): inputs live in judge-owned shared memory (mapped
read-only by the runner on the CPU, staged and copied on a GPU), outputs are poisoned by the judge (CPU)
before every call and read by the judge after the reply. Timed calls are verified on an unpredictable
schedule (verification.py) and the runner's claimed times are checked against the judge's clock.
`run_evaluation(request, runners)` never raises: every failure becomes a report with a reason code.
See docs/evaluation.md for the order of the checks and what each can and cannot see.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import secrets
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kernelfoundry.evaluation import comparison, observation, reasons, verification
from kernelfoundry.evaluation.backends import Backend, backend_for_device
from kernelfoundry.evaluation.correctness import TrialHistory, check_trial
from kernelfoundry.evaluation.glue_checks import check_glue
from kernelfoundry.evaluation.reasons import EvaluationFailure, classify_exception
from kernelfoundry.evaluation.report import EvaluationReport, ShapeReport
from kernelfoundry.evaluation.runner_client import RunnerProcess
from kernelfoundry.evaluation.settings import EvaluationRequest
from kernelfoundry.evaluation.shared_memory import Arena, TensorSpec, dtype_name, layout
from kernelfoundry.stack.quiet_host import QuietHost
from kernelfoundry.tasks.model import ShapeVariant, TaskError, Tolerance
from kernelfoundry.tasks.reference import instantiate

NULL_CALLS = 10
SEED_RANGE = 1 << 31


def random_seed() -> int:
    """Seeds the runner cannot predict (its author may know the task, never these)."""
    return secrets.randbelow(SEED_RANGE)


def as_list(value: Any, what: str) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple) and all(isinstance(v, torch.Tensor) for v in value):
        return list(value)
    raise EvaluationFailure(reasons.WRONG_SHAPE, f"{what} returned {type(value).__name__}, not tensors")


def _is_float(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and value.dtype.is_floating_point


def _json_scalar(value: Any, what: str) -> Any:
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_json_scalar(v, what) for v in value]
    raise EvaluationFailure(
        reasons.KERNEL_ERROR, f"{what} of type {type(value).__name__} cannot be sent to the runner"
    )


@dataclass
class InputSet:
    """One input set: judge-owned memory the runner sees, and the values the judge computes on."""

    arena: Arena
    specs: list[TensorSpec]  # where the set's tensors lie in the arena, in input order
    host: list[Any]  # tensors viewing the arena; Python scalars as get_inputs() gave them
    values: list[Any]  # what reference and eager use: the host views (CPU) or device tensors (GPU)
    seed: int
    reference: list[Any] | None = None  # cached for the current values
    previous_reference: list[Any] | None = None  # the answer for the values before the last refresh
    refreshed_since_check: bool = False


@dataclass
class ShapeState:
    """Everything built once per shape variant."""

    index: int
    shape: ShapeVariant
    model: Any
    reference_model: Any
    history: TrialHistory
    sets: list[InputSet] = field(default_factory=list)
    trial_sets: int = 0
    expected: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)  # outputs: dtype, shape
    outputs: list[Any] = field(default_factory=list)  # judge views of the output arena
    arenas: list[Arena] = field(default_factory=list)


class Evaluation:
    """One request, judged step by step; the candidate runs in `runner`."""

    def __init__(self, request: EvaluationRequest, runner_factory: Callable[[], RunnerProcess]) -> None:
        import torch

        self.torch = torch
        self.request = request
        self.task = request.task
        self.settings = request.settings
        self.backend: Backend = backend_for_device(request.device)
        self.staged = self.backend.memory == "staged"
        self.device = self.backend.judge_device(request.device, self.settings.flush_cache)
        self.runner_factory = runner_factory
        self.runner: RunnerProcess | None = None
        self.states: list[ShapeState] = []
        self.arenas: list[Arena] = []  # every memfd of this evaluation, closed at the end
        self.deadline = 0.0
        self.failed_trial: dict[str, Any] | None = None
        self.tolerance: Tolerance | None = None
        self.tolerance_source = ""
        self.precision = ""
        self.reference_dtype = ""
        self.launches = 0
        self.notes: list[str] = []
        self.counters = {
            "trials": 0,
            "timed_runs": 0,
            "warmup_runs": 0,
            "input_sets": 0,
            "kernel_launches": 0,
            "checked_timed_runs": 0,
            "refreshed_timed_runs": 0,
        }

    # ---- setup -------------------------------------------------------------------------------------
    def _threads(self) -> int:
        if self.settings.cpu_threads:
            return self.settings.cpu_threads
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

    def _instantiate(self, shape: ShapeVariant, seed: int) -> Any:
        try:
            return instantiate(self.task, shape, seed, self.request.device)
        except TaskError as exc:
            raise EvaluationFailure(reasons.REFERENCE_ERROR, str(exc)) from exc

    def _start_runner(self) -> RunnerProcess:
        runner = self.runner_factory()
        self.runner = runner
        runner.wait_ready()
        runner.begin_candidate(observation.children(os.getpid()) - {runner.pid})
        self.deadline = time.monotonic() + self.settings.deadline_s
        with open(self.request.artifact, "rb") as artifact:
            self._ask(
                "load",
                "loaded",
                fds=(artifact.fileno(),),
                entry_point=self.request.kernel.entry_point,
                glue=self.request.kernel.glue,
                threads=self._threads(),
                artifact_name=self.request.artifact.name,
            )
        return runner

    def _ask(self, op: str, expected: str, fds: tuple[int, ...] = (), **fields: Any) -> tuple[Any, int]:
        assert self.runner is not None
        return self.runner.request(op, expected, self.deadline, fds, **fields)

    # ---- buffers -----------------------------------------------------------------------------------
    def _arena(self, size: int, name: str) -> Arena:
        arena = Arena.create(size, name)
        self.arenas.append(arena)
        return arena

    def _new_set(self, inputs: list[Any], seed: int) -> InputSet:
        torch = self.torch
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
        specs, size = layout([(dtype_name(t.dtype), tuple(t.shape)) for t in tensors])
        arena = self._arena(size, "kf-inputs")
        views = iter([arena.tensor(s) for s in specs])
        host = [next(views) if isinstance(x, torch.Tensor) else x for x in inputs]
        for view, value in zip(host, inputs, strict=True):
            if isinstance(value, torch.Tensor):
                view.copy_(value)
        values = list(inputs) if self.staged else host
        return InputSet(arena, specs, host, values, seed)

    def _set_message(self, input_set: InputSet) -> list[dict[str, Any]]:
        torch = self.torch
        items: list[dict[str, Any]] = []
        offset_specs = iter(input_set.specs)
        for value in input_set.host:
            if isinstance(value, torch.Tensor):
                items.append({"tensor": next(offset_specs).to_json()})
            else:
                items.append({"scalar": _json_scalar(value, "an input")})
        return items

    def _refresh(self, state: ShapeState, input_set: InputSet) -> None:
        """Fresh values, written in place into the set the runner already knows."""
        torch = self.torch
        input_set.previous_reference = self._reference_for(state, input_set)
        fresh = self._instantiate(state.shape, random_seed()).inputs
        with torch.no_grad():
            for i, value in enumerate(fresh):
                if isinstance(value, torch.Tensor):
                    input_set.host[i].copy_(value)
                    if self.staged:
                        input_set.values[i].copy_(value)
        input_set.reference = None
        input_set.refreshed_since_check = True

    def _shape_state(self, index: int, shape: ShapeVariant, seeds_per_shape: int) -> ShapeState:
        torch = self.torch
        first_seed = random_seed()
        instance = self._instantiate(shape, first_seed)
        reference_model = copy.deepcopy(instance.model).to(torch.float64)
        state = ShapeState(index, shape, instance.model, reference_model, TrialHistory(index, shape.name))
        seeds = [first_seed] + [random_seed() for _ in range(seeds_per_shape - 1)]
        state.trial_sets = len(seeds)
        timing_seeds = [random_seed() for _ in range(self.settings.input_sets)]
        for seed in seeds + timing_seeds:
            inputs = instance.inputs if seed == first_seed else self._instantiate(shape, seed).inputs
            state.sets.append(self._new_set(inputs, seed))
        eager = self._eager(state, state.sets[0].values)
        state.expected = [(dtype_name(e.dtype), tuple(e.shape)) for e in eager]
        out_specs, out_size = layout(state.expected)
        output_arena = self._arena(out_size, "kf-outputs")
        state.outputs = [output_arena.tensor(s) for s in out_specs]
        # Parameters and buffers by name: the ABI order for units without glue, state_dict for glue.
        named: dict[str, Any] = {}
        for name, tensor in [*instance.model.named_parameters(), *instance.model.named_buffers()]:
            named.setdefault(name, tensor.detach())
        for name, tensor in instance.model.state_dict().items():
            named.setdefault(name, tensor.detach())
        names = list(named)
        param_specs, param_size = layout([(dtype_name(named[n].dtype), tuple(named[n].shape)) for n in names])
        param_arena = self._arena(param_size, "kf-params")
        for name, spec in zip(names, param_specs, strict=True):
            param_arena.tensor(spec).copy_(named[name])
        state.arenas = [s.arena for s in state.sets] + [param_arena, output_arena]
        glue = bool(self.request.kernel.glue.strip())
        direct = [n for n, _ in instance.model.named_parameters()] + [
            n for n, _ in instance.model.named_buffers()
        ]
        self._ask(
            "bind",
            "bound",
            fds=tuple(a.fd for a in state.arenas),
            shape=index,
            sets=[self._set_message(s) for s in state.sets],
            sizes=[a.size for a in state.arenas],
            params=[{"name": n, "tensor": s.to_json()} for n, s in zip(names, param_specs, strict=True)],
            direct_params=direct,
            outputs=[s.to_json() for s in out_specs],
            init_inputs=_json_scalar(list(instance.init_inputs), "an init input") if glue else [],
        )
        return state

    # ---- the judge's own computations ----------------------------------------------------------------
    def _high_precision(self, state: ShapeState, inputs: list[Any]) -> list[Any]:
        """The reference in float64 (TF32 off); float32 with TF32 off where float64 is unsupported."""
        torch = self.torch
        tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        try:
            with torch.no_grad(), self.device.on_stream():
                try:
                    wide = [x.to(torch.float64) if _is_float(x) else x for x in inputs]
                    outputs = as_list(state.reference_model(*wide), "the reference")
                    ref_dtype = "float64"
                except EvaluationFailure:
                    raise
                except Exception:
                    state.reference_model = copy.deepcopy(state.model).to(torch.float32)
                    wide = [x.to(torch.float32) if _is_float(x) else x for x in inputs]
                    outputs = as_list(state.reference_model(*wide), "the reference")
                    ref_dtype = "float32 (TF32 off)"
        except EvaluationFailure:
            raise
        except Exception as exc:
            raise EvaluationFailure(reasons.REFERENCE_ERROR, f"reference forward failed: {exc}") from exc
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        self.reference_dtype = ref_dtype
        return [o.detach().clone() for o in outputs]

    def _eager(self, state: ShapeState, inputs: list[Any]) -> list[Any]:
        try:
            with self.torch.no_grad(), self.device.on_stream():
                return as_list(state.model(*inputs), "the reference")
        except EvaluationFailure:
            raise
        except Exception as exc:
            raise EvaluationFailure(reasons.REFERENCE_ERROR, f"reference forward failed: {exc}") from exc

    def _reference_for(self, state: ShapeState, input_set: InputSet) -> list[Any]:
        if input_set.reference is None:
            input_set.reference = self._high_precision(state, input_set.values)
        return input_set.reference

    # ---- calls -------------------------------------------------------------------------------------
    def _poison_outputs(self, state: ShapeState) -> None:
        """Shared memory: the judge poisons the outputs itself (staged: the runner does, on the device)."""
        if not self.staged:
            for out in state.outputs:
                comparison.poison_(out)

    def _call(self, state: ShapeState, set_index: int, trial: bool, refresh: bool = False) -> tuple[Any, int]:
        """One call of the candidate on set `set_index` (outputs already poisoned)."""
        reply, wall = self._ask(
            "call", "called", shape=state.index, set=set_index, trial=trial, refresh=refresh
        )
        self.launches += reply.launches
        if reply.outputs:  # glue: what forward() returned
            if len(reply.outputs) != len(state.expected):
                raise EvaluationFailure(
                    reasons.WRONG_SHAPE,
                    f"candidate returned {len(reply.outputs)} outputs, the reference {len(state.expected)}",
                )
            for i, (meta, (dtype, shape)) in enumerate(zip(reply.outputs, state.expected, strict=True)):
                if tuple(meta.shape) != shape:
                    raise EvaluationFailure(
                        reasons.WRONG_SHAPE, f"output {i} has shape {tuple(meta.shape)}, expected {shape}"
                    )
                if meta.dtype != dtype:
                    raise EvaluationFailure(
                        reasons.WRONG_DTYPE,
                        f"output {i} has dtype torch.{meta.dtype}, expected torch.{dtype}",
                    )
        return reply, wall

    def _read_outputs(self, state: ShapeState) -> list[Any]:
        """The outputs of the last call, as the judge sees them (fetched from the runner when staged)."""
        if not self.staged:
            return state.outputs
        self._ask("fetch", "fetched", shape=state.index)
        return [o.to(self.request.device) for o in state.outputs]

    # ---- correctness -------------------------------------------------------------------------------
    def _trial(self, state: ShapeState, seed_index: int) -> None:
        input_set = state.sets[seed_index]
        self.failed_trial = {
            "shape": state.shape.name,
            "seed": input_set.seed,
            "trial": self.counters["trials"],
        }
        inputs = input_set.values
        reference = self._reference_for(state, input_set)
        eager = self._eager(state, inputs)
        eager_error = max(comparison.max_abs_error(e, r) for e, r in zip(eager, reference, strict=True))
        dtype = eager[0].dtype
        self.tolerance, self.tolerance_source = comparison.effective_tolerance(
            dtype, eager_error, self.task.tolerance, self.settings.tolerance
        )
        state.history.error_floor = max(state.history.error_floor, 2.0 * eager_error)
        self.precision = f"{self.reference_dtype} reference, compared in {str(dtype).replace('torch.', '')}"
        state.history.eager_degenerate = [
            comparison.is_degenerate(e, r) for e, r in zip(eager, reference, strict=True)
        ]
        self.counters["trials"] += 1
        self._poison_outputs(state)
        self._call(state, seed_index, trial=True)
        outputs = self._read_outputs(state)
        check_trial(state.history, seed_index, outputs, eager, reference, self.tolerance)
        state.history.passed_seeds.append(seed_index)
        state.history.previous_reference = reference

    def _probe_outside_stream(self, state: ShapeState) -> None:
        """Staged devices (CUDA): the runner calls the unit while its stream is being captured into a
        graph, so nothing enqueued on it runs; an output written anyway came from another stream."""
        if not self.staged or self.request.kernel.glue.strip():
            return
        reply, _ = self._ask("probe", "probed", shape=state.index, set=0)
        if reply.note:
            self.notes.append(reply.note)
        if reply.written:
            raise EvaluationFailure(
                reasons.ASYNC_SIDE_STREAM,
                "an output was written while the given stream was being captured into a CUDA graph (so "
                "nothing enqueued on it ran): the unit does its work on another stream",
            )

    # ---- timing ------------------------------------------------------------------------------------
    def _check_timed_outputs(self, state: ShapeState, input_set: InputSet, call: int) -> None:
        assert self.tolerance is not None
        outputs = self._read_outputs(state)
        reference = self._reference_for(state, input_set)
        refreshed = input_set.refreshed_since_check
        input_set.refreshed_since_check = False
        self.counters["checked_timed_runs"] += 1
        for i, (out, ref) in enumerate(zip(outputs, reference, strict=True)):
            unwritten = comparison.unwritten_mask(out, ref)
            if bool(unwritten.any().item()):
                raise EvaluationFailure(
                    reasons.OUTPUT_NOT_WRITTEN,
                    f"timed call {call}: output {i} has {int(unwritten.sum().item())} of {out.numel()} "
                    "elements still holding the poison",
                )
            result = comparison.compare(out, ref, self.tolerance, state.history.error_floor)
            if not result.ok:
                stale = input_set.previous_reference
                if (
                    refreshed
                    and stale is not None
                    and comparison.compare(out, stale[i], self.tolerance, state.history.error_floor).ok
                ):
                    raise EvaluationFailure(
                        reasons.CACHED_RESULT,
                        f"timed call {call}: new values written into its input set were not reflected in "
                        f"output {i}, which still holds the answer for the old values: "
                        f"{result.describe(self.tolerance)}",
                    )
                raise EvaluationFailure(
                    reasons.TIMED_RUN_WRONG,
                    f"timed call {call} (checked at random afterwards) was wrong in output {i}: "
                    f"{result.describe(self.tolerance)}",
                )

    def _time_candidate(self, state: ShapeState) -> ShapeReport:
        runs, warmup = self.settings.runs_for(self.backend.name), self.settings.warmup_runs
        first = state.trial_sets
        k = len(state.sets) - first
        self.counters["input_sets"] += k
        plan = verification.plan_calls(warmup + runs, k)
        claims: list[int] = []
        walls: list[int] = []
        for n, planned in enumerate(plan):
            self.failed_trial = {"shape": state.shape.name, "seed": None, "trial": f"timed call {n}"}
            input_set = state.sets[first + planned.input_set]
            if planned.refresh:
                self._refresh(state, input_set)
                self.counters["refreshed_timed_runs"] += 1
            self._poison_outputs(state)
            self.device.flush_cache()
            reply, wall = self._call(state, first + planned.input_set, trial=False, refresh=planned.refresh)
            verification.check_claim(reply.claimed_ns, wall, n)
            if n >= warmup:
                claims.append(reply.claimed_ns)
                walls.append(wall)
            if planned.check:
                self._check_timed_outputs(state, input_set, n)
        self.counters["timed_runs"] += runs
        self.counters["warmup_runs"] += warmup
        self.failed_trial = {"shape": state.shape.name, "seed": None, "trial": "timing cross-check"}
        nulls = [self._ask("idle", "idle")[1] for _ in range(NULL_CALLS)]
        calls = verification.batch_calls(statistics.median(claims), statistics.median(walls))
        order = [first + (i % k) for i in range(calls)]
        batches = [
            self._ask("batch", "batch_done", shape=state.index, sets=order)[1]
            for _ in range(verification.BATCH_REPEATS)
        ]
        check = verification.cross_check(
            claims, batches, calls, nulls, self.backend.call_overhead_allowance_ns
        )
        self.failed_trial = None
        self.notes.append(
            f"{state.shape.name}: {check.describe()}; judge's round-trip median "
            f"{statistics.median(walls) / 1e6:.4f} ms"
        )
        claimed_ms = tuple(c / 1e6 for c in claims)
        from kernelfoundry.evaluation.timing import Timings

        timings = Timings(claimed_ms)
        return ShapeReport(
            shape=state.shape.name,
            runtime_ms=timings.median_ms,
            runtime_spread_ms=timings.iqr_ms,
            max_abs_error=state.history.max_abs_error,
            max_rel_error=state.history.max_rel_error,
        )

    def _time_baselines(self, state: ShapeState, report: ShapeReport) -> None:
        """Eager and torch.compile, timed in the judge (no candidate ever ran here) on the timing sets."""
        if not self.settings.measure_baselines:
            return
        torch = self.torch
        timer = self.device.baseline_timer()
        runs, warmup = self.settings.runs_for(self.backend.name), self.settings.warmup_runs
        sets = [s.values for s in state.sets[state.trial_sets :]]
        k = len(sets)
        with torch.no_grad():
            report.baseline_ms = timer.measure(lambda i: state.model(*sets[i % k]), runs, warmup).median_ms
        if self.settings.compile_baseline_for(self.backend.name):
            try:
                compiled = torch.compile(state.model)
                with torch.no_grad():
                    compiled(*sets[0])
                    self.device.synchronize()
                    report.compile_baseline_ms = timer.measure(
                        lambda i: compiled(*sets[i % k]), runs, warmup
                    ).median_ms
            except Exception as exc:  # best effort: no compiler, unsupported op ...
                self.notes.append(
                    f"torch.compile baseline unavailable: {type(exc).__name__}: {str(exc)[:200]}"
                )
        if report.baseline_ms is not None and report.runtime_ms:
            report.speedup = report.baseline_ms / report.runtime_ms
        if report.compile_baseline_ms is not None and report.runtime_ms:
            report.speedup_vs_compile = report.compile_baseline_ms / report.runtime_ms

    def _finish_runner(self) -> None:
        """Kill the runner; a process it left behind (its group, or reparented to the judge) fails it."""
        if self.runner is None:
            return
        known = self.runner._judge_children_before
        leftovers = self.runner.close()
        adopted = observation.children(os.getpid()) - known - {self.runner.pid}
        stray = sorted(set(leftovers) | adopted)
        for pid in stray:
            kill_and_reap(pid)
        if stray:
            raise EvaluationFailure(
                reasons.BACKGROUND_PROCESS,
                f"{len(stray)} process(es) started by the candidate were still running after its runner "
                f"ended (pids {stray[:5]}); they were killed",
            )

    # ---- the whole evaluation ----------------------------------------------------------------------
    def run(self) -> EvaluationReport:
        if self.request.kernel.glue.strip():
            findings = check_glue(self.request.kernel.glue, self.task.reference_source)
            if findings:
                first = findings[0]
                raise EvaluationFailure(first.reason, f"line {first.line}: {first.message}")
        self.torch.set_num_threads(self._threads())
        self.device.setup()
        with self.device.on_stream():  # every judge-side computation, instantiation included
            return self._run_on_stream()

    def _run_on_stream(self) -> EvaluationReport:
        self._start_runner()
        shapes = list(self.task.shapes)
        seeds_per_shape = max(self.task.seeds, math.ceil(self.settings.correctness_trials / len(shapes)))
        states = self.states
        for index, shape in enumerate(shapes):
            state = self._shape_state(index, shape, seeds_per_shape)
            states.append(state)
            for seed_index in range(seeds_per_shape):
                self._trial(state, seed_index)
        if self.request.kernel.glue.strip() and self.launches == 0:
            raise EvaluationFailure(
                reasons.GLUE_NO_KERNEL_LAUNCH, "ModelNew.forward never called kf.launch during the trials"
            )
        self.failed_trial = {
            "shape": states[0].shape.name,
            "seed": states[0].sets[0].seed,
            "trial": "stream probe",
        }
        self._probe_outside_stream(states[0])
        self.failed_trial = None
        with QuietHost(self.settings.timing_lock_dir).timing():
            per_shape = [self._time_candidate(state) for state in states]
            self._finish_runner()
            for state, report in zip(states, per_shape, strict=True):
                self._time_baselines(state, report)
        return self._report(per_shape, states)

    def _report(self, per_shape: list[ShapeReport], states: list[ShapeState]) -> EvaluationReport:
        runtime = sum(s.runtime_ms or 0.0 for s in per_shape)
        baseline = sum(s.baseline_ms for s in per_shape if s.baseline_ms is not None) if per_shape else None
        has_baseline = all(s.baseline_ms is not None for s in per_shape)
        has_compile = all(s.compile_baseline_ms is not None for s in per_shape)
        compile_ms = sum(s.compile_baseline_ms or 0.0 for s in per_shape) if has_compile else None
        return EvaluationReport(
            compiled=True,
            correct=True,
            max_abs_error=max(s.history.max_abs_error for s in states),
            max_rel_error=max(s.history.max_rel_error for s in states),
            runtime_ms=runtime,
            runtime_spread_ms=sum(s.runtime_spread_ms or 0.0 for s in per_shape),
            baseline_ms=baseline if has_baseline else None,
            compile_baseline_ms=compile_ms,
            speedup=(baseline / runtime) if has_baseline and baseline and runtime else None,
            speedup_vs_compile=(compile_ms / runtime) if compile_ms and runtime else None,
            per_shape=per_shape,
            **self._common(),
        )

    def _common(self) -> dict[str, Any]:
        tol = self.tolerance
        self.counters["kernel_launches"] = self.launches
        return {
            "precision": f"{self.precision}; tolerance from {self.tolerance_source}"
            if self.precision
            else "",
            "tolerance_atol": tol.atol if tol else None,
            "tolerance_rtol": tol.rtol if tol else None,
            "device": self.request.device,
            "device_name": self.device.name(),
            "counters": dict(self.counters),
            "notes": list(self.notes),
        }

    def failure_report(self, failure: EvaluationFailure) -> EvaluationReport:
        return EvaluationReport.failure(
            failure.reason, failure.message, failed_trial=self.failed_trial, **self._common()
        )

    def close(self) -> None:
        """Always: the runner goes, and so does any process it left behind; the shared memory of
        this evaluation is released (a memfd lives as long as a descriptor of it is open)."""
        if self.runner is not None and not self.runner.closed:
            with contextlib.suppress(EvaluationFailure):
                self._finish_runner()
        for arena in self.arenas:
            arena.close()


def kill_and_reap(pid: int) -> None:
    """End a process the candidate left behind (the judge is its subreaper) and collect its status."""
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, 0)


def run_evaluation(
    request: EvaluationRequest, runner_factory: Callable[[], RunnerProcess]
) -> tuple[EvaluationReport, bool]:
    """Judge one request; returns (report, whether this judge's own device context is broken)."""
    started = time.monotonic()
    evaluation: Evaluation | None = None
    try:
        evaluation = Evaluation(request, runner_factory)
        report = evaluation.run()
    except EvaluationFailure as failure:
        report = (
            evaluation.failure_report(failure)
            if evaluation
            else EvaluationReport.failure(failure.reason, failure.message)
        )
    except Exception as exc:  # a bug or an unexpected device state in the judge: never let it escape
        failure = classify_exception(exc, "evaluation")
        if failure.reason == reasons.GLUE_ERROR:
            failure = EvaluationFailure(reasons.WORKER_ERROR, f"{type(exc).__name__}: {exc}")
        report = (
            evaluation.failure_report(failure)
            if evaluation
            else EvaluationReport.failure(failure.reason, failure.message)
        )
    finally:
        if evaluation is not None:
            evaluation.close()
    broken = evaluation.device.health() if evaluation is not None else None
    if broken is not None and evaluation is not None:
        failure = classify_exception(broken, "the judge's device after the evaluation")
        if report.correct:
            report = evaluation.failure_report(failure)
        else:
            report.message = f"{report.message}; then {failure.message}"
    report.duration_s = time.monotonic() - started
    return report, broken is not None
