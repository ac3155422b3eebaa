"""The evaluation itself, in the process that owns the device: correctness trials, anti-cheat checks,
timing of the candidate and of the eager / torch.compile baselines.

`run_evaluation(request)` never raises: every failure becomes a report with a reason code. It runs
untrusted native code in-process, so it must only be called in a disposable process (the worker's
child, see worker.py); a segfault or a hang is handled there, not here. Order of checks for each trial:
call -> (CUDA) stream snapshot vs device-synchronised output -> shape/dtype -> inputs unchanged ->
every element written -> values. See docs/evaluation.md for the reasoning behind each check.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import platform
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kernelfoundry.evaluation import comparison, reasons
from kernelfoundry.evaluation.correctness import TrialHistory, check_trial
from kernelfoundry.evaluation.glue_checks import check_glue
from kernelfoundry.evaluation.glue_runtime import KernelLauncher, build_model_new, load_glue
from kernelfoundry.evaluation.reasons import EvaluationFailure
from kernelfoundry.evaluation.report import EvaluationReport, ShapeReport
from kernelfoundry.evaluation.settings import EvaluationRequest
from kernelfoundry.evaluation.timing import CpuTimer, CudaTimer
from kernelfoundry.evaluation.unit import CompiledUnit, DescriptorArray, as_tensors
from kernelfoundry.stack.quiet_host import QuietHost
from kernelfoundry.tasks.model import ShapeVariant, TaskError, Tolerance
from kernelfoundry.tasks.reference import instantiate

TIMING_SEED_BASE = 10_000
CACHE_PROBE_SEED = 99_991
STREAM_PROBE_SEED = 99_989
TRIAL_SEED_BASE = 1


@dataclass
class ShapeState:
    """Everything built once per shape variant."""

    index: int
    shape: ShapeVariant
    model: Any
    init_inputs: list[Any]
    reference: Any  # the model in the high-precision dtype
    candidate: Any | None  # ModelNew instance, when the kernel has glue
    history: TrialHistory


def cpu_name() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def as_list(value: Any, what: str) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple) and all(isinstance(v, torch.Tensor) for v in value):
        return list(value)
    raise EvaluationFailure(reasons.WRONG_SHAPE, f"{what} returned {type(value).__name__}, not tensors")


def classify_exception(exc: BaseException, where: str) -> EvaluationFailure:
    """A device error's text picks its reason; anything else raised by candidate code is a glue error."""
    if isinstance(exc, EvaluationFailure):
        return exc
    text = f"{type(exc).__name__}: {exc}"
    lowered = text.lower()
    if "illegal memory access" in lowered or "illegal address" in lowered or "misaligned address" in lowered:
        return EvaluationFailure(reasons.ILLEGAL_ADDRESS, f"{where}: {text}")
    if "cuda error" in lowered or "acceleratorerror" in lowered or "cudaerror" in lowered:
        return EvaluationFailure(reasons.DEVICE_ERROR, f"{where}: {text}")
    return EvaluationFailure(reasons.GLUE_ERROR, f"{where} raised {text}")


class Evaluation:
    """One request, evaluated step by step in this process."""

    def __init__(self, request: EvaluationRequest) -> None:
        import torch

        self.torch = torch
        self.request = request
        self.task = request.task
        self.settings = request.settings
        self.device = request.device
        self.is_cuda = request.backend == "cuda"
        self.stream: Any = None
        self.unit: CompiledUnit | None = None
        self.launcher: KernelLauncher | None = None
        self.model_new_cls: type | None = None
        self.failed_trial: dict[str, Any] | None = None
        self.tolerance: Tolerance | None = None
        self.tolerance_source = ""
        self.precision = ""
        self.reference_dtype = ""
        self.notes: list[str] = []
        self.counters = {
            "trials": 0,
            "timed_runs": 0,
            "warmup_runs": 0,
            "input_sets": 0,
            "kernel_launches": 0,
        }

    # ---- setup -------------------------------------------------------------------------------------
    def _threads(self) -> int:
        if self.settings.cpu_threads:
            return self.settings.cpu_threads
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

    def _setup(self) -> None:
        torch = self.torch
        threads = self._threads()
        torch.set_num_threads(threads)
        if self.is_cuda:
            if not torch.cuda.is_available():
                raise EvaluationFailure(
                    reasons.BAD_REQUEST, f"device {self.device} requested but CUDA is absent"
                )
            torch.cuda.set_device(torch.device(self.device))
            self.stream = torch.cuda.Stream(device=torch.device(self.device))
        self.unit = CompiledUnit(self.request.artifact)
        self.unit.set_threads(threads)
        if self.request.kernel.glue.strip():
            self.launcher = KernelLauncher(self.unit, self._stream_handle, comparison.poison_)
            self.model_new_cls = load_glue(self.request.kernel.glue, self.launcher)
        else:
            self.unit.entry(self.request.kernel.entry_point)

    def _stream_handle(self) -> int | None:
        return int(self.torch.cuda.current_stream().cuda_stream) if self.is_cuda else None

    @contextlib.contextmanager
    def _on_stream(self) -> Iterator[None]:
        if self.is_cuda:
            with self.torch.cuda.stream(self.stream):
                yield
        else:
            yield

    def _sync(self) -> None:
        if self.is_cuda:
            self.torch.cuda.synchronize()

    def _instantiate(self, shape: ShapeVariant, seed: int) -> Any:
        try:
            return instantiate(self.task, shape, seed, self.device)
        except TaskError as exc:
            raise EvaluationFailure(reasons.REFERENCE_ERROR, str(exc)) from exc

    def _shape_state(self, index: int, shape: ShapeVariant, instance: Any) -> ShapeState:
        torch = self.torch
        reference = copy.deepcopy(instance.model).to(torch.float64)
        candidate = None
        if self.model_new_cls is not None:
            candidate = build_model_new(self.model_new_cls, instance.init_inputs, instance.model, self.device)
        history = TrialHistory(index, shape.name)
        return ShapeState(index, shape, instance.model, instance.init_inputs, reference, candidate, history)

    # ---- calls -------------------------------------------------------------------------------------
    def _high_precision(self, state: ShapeState, inputs: list[Any]) -> list[Any]:
        """The reference in float64 (TF32 off); float32 with TF32 off where float64 is unsupported."""
        torch = self.torch
        tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        try:
            with torch.no_grad():
                try:
                    wide = [x.to(torch.float64) if _is_float(x) else x for x in inputs]
                    outputs = as_list(state.reference(*wide), "the reference")
                    ref_dtype = "float64"
                except EvaluationFailure:
                    raise
                except Exception:
                    state.reference = copy.deepcopy(state.model).to(torch.float32)
                    wide = [x.to(torch.float32) if _is_float(x) else x for x in inputs]
                    outputs = as_list(state.reference(*wide), "the reference")
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
            with self.torch.no_grad():
                return as_list(state.model(*inputs), "the reference")
        except EvaluationFailure:
            raise
        except Exception as exc:
            raise EvaluationFailure(reasons.REFERENCE_ERROR, f"reference forward failed: {exc}") from exc

    def _direct_inputs(self, state: ShapeState, inputs: list[Any]) -> list[Any]:
        tensors = as_tensors(inputs, self.torch.device(self.device))
        params = [p.detach() for p in state.model.parameters()]
        buffers = [b.detach() for b in state.model.buffers()]
        return tensors + params + buffers

    def _call_candidate(self, state: ShapeState, inputs: list[Any], expected: list[Any]) -> list[Any]:
        """One correctness call with fresh, poisoned outputs; returns the outputs (device-synchronised)."""
        torch = self.torch
        where = (
            "ModelNew.forward"
            if state.candidate is not None
            else f"entry point `{self.request.kernel.entry_point}`"
        )
        try:
            if state.candidate is None:
                outputs = [torch.empty_like(e, memory_format=torch.contiguous_format) for e in expected]
                for out in outputs:
                    comparison.poison_(out)
                self._sync()
                assert self.unit is not None
                self.unit.call(
                    self.request.kernel.entry_point,
                    DescriptorArray(self._direct_inputs(state, inputs)),
                    DescriptorArray(outputs),
                    self._stream_handle(),
                )
            else:
                self._sync()
                with torch.no_grad():
                    outputs = as_list(state.candidate(*inputs), "ModelNew.forward")
            snapshots = [o.clone() for o in outputs] if self.is_cuda else None
            self._sync()
        except Exception as exc:
            raise classify_exception(exc, where) from exc
        if snapshots is not None:
            for i, (snap, out) in enumerate(zip(snapshots, outputs, strict=True)):
                if not comparison.bitwise_equal(snap, out):
                    raise EvaluationFailure(
                        reasons.ASYNC_SIDE_STREAM,
                        f"output {i} changed after the call returned: work was still running outside the "
                        "given stream (read on the stream vs after torch.cuda.synchronize())",
                    )
        return outputs

    # ---- correctness -------------------------------------------------------------------------------
    def _trial(self, state: ShapeState, seed_index: int, seed: int, keep_alive: list[Any]) -> None:
        torch = self.torch
        self.failed_trial = {"shape": state.shape.name, "seed": seed, "trial": self.counters["trials"]}
        instance = self._instantiate(state.shape, seed)
        inputs = instance.inputs
        reference = self._high_precision(state, inputs)
        eager = self._eager(state, inputs)
        eager_error = max(comparison.max_abs_error(e, r) for e, r in zip(eager, reference, strict=True))
        dtype = eager[0].dtype
        self.tolerance, self.tolerance_source = comparison.effective_tolerance(
            dtype, eager_error, self.task.tolerance, self.settings.tolerance
        )
        self.precision = f"{self.reference_dtype} reference, compared in {str(dtype).replace('torch.', '')}"
        originals = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        params = [p.detach().clone() for p in state.model.parameters()]
        state.history.eager_degenerate = [
            comparison.is_degenerate(e, r) for e, r in zip(eager, reference, strict=True)
        ]
        # The eager outputs are scrubbed and kept alive: their memory cannot be handed to the candidate.
        for e in eager:
            comparison.poison_(e)
        self.counters["trials"] += 1
        outputs = self._call_candidate(state, inputs, eager)
        for i, (now, before) in enumerate(zip(inputs, originals, strict=True)):
            if isinstance(now, torch.Tensor) and not comparison.bitwise_equal(now, before):
                raise EvaluationFailure(reasons.INPUT_MODIFIED, f"input {i} was modified by the candidate")
        for (name, p), before in zip(state.model.named_parameters(), params, strict=True):
            if not comparison.bitwise_equal(p.detach(), before):
                raise EvaluationFailure(
                    reasons.INPUT_MODIFIED, f"parameter `{name}` was modified by the candidate"
                )
        assert self.tolerance is not None
        check_trial(state.history, seed_index, outputs, eager, reference, self.tolerance)
        state.history.passed_seeds.append(seed_index)
        state.history.previous_reference = reference
        # Holding every trial's tensors until the trials end makes each allocation land at a new address:
        # a unit that memoises by pointer cannot replay an earlier trial's answer.
        keep_alive.append((inputs, outputs, eager))

    def _probe_outside_stream(self, state: ShapeState) -> None:
        """CUDA: call the unit while its stream is captured into a CUDA graph, so nothing it enqueues
        on that stream runs; an output that changes anyway was written by work on another stream.

        Deterministic where the snapshot check in _call_candidate is a race. A unit that cannot be
        captured (it synchronises, say) makes the probe inconclusive: noted, never a failure.
        Candidates with glue allocate their outputs inside forward() and are not probed.
        """
        if not self.is_cuda or state.candidate is not None or self.unit is None:
            return
        torch = self.torch
        inputs = self._instantiate(state.shape, STREAM_PROBE_SEED).inputs
        outputs = [
            torch.empty_like(e, memory_format=torch.contiguous_format) for e in self._eager(state, inputs)
        ]
        for out in outputs:
            comparison.poison_(out)
        before = [o.clone() for o in outputs]
        in_desc, out_desc = DescriptorArray(self._direct_inputs(state, inputs)), DescriptorArray(outputs)
        self._sync()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, stream=self.stream, capture_error_mode="relaxed"):
                self.unit.call(self.request.kernel.entry_point, in_desc, out_desc, self._stream_handle())
        except Exception as exc:  # not capturable: inconclusive
            self.notes.append(f"stream-capture probe inconclusive: {type(exc).__name__}: {str(exc)[:200]}")
        try:
            self._sync()
        except Exception as exc:
            raise classify_exception(exc, "stream-capture probe") from exc
        for i, (now, then) in enumerate(zip(outputs, before, strict=True)):
            if not comparison.bitwise_equal(now, then):
                raise EvaluationFailure(
                    reasons.ASYNC_SIDE_STREAM,
                    f"output {i} was written while the given stream was being captured into a CUDA graph "
                    "(so nothing enqueued on it ran): the unit does its work on another stream",
                )
        del graph

    # ---- timing ------------------------------------------------------------------------------------
    def _timer(self) -> CpuTimer | CudaTimer:
        if self.is_cuda:
            return CudaTimer(self.torch.device(self.device), self.stream, self.settings.flush_cache)
        return CpuTimer(self.settings.flush_cache)

    def _time_shape(self, state: ShapeState, timer: CpuTimer | CudaTimer) -> ShapeReport:
        torch = self.torch
        k = self.settings.input_sets
        sets = [self._instantiate(state.shape, TIMING_SEED_BASE + j).inputs for j in range(k)]
        expected = self._eager(state, sets[0])
        runs, warmup = self.settings.runs_for(self.request.backend), self.settings.warmup_runs
        self.counters["input_sets"] += k
        candidate_call, outputs = self._timed_candidate(state, sets, expected)
        if self.launcher is not None:
            self.launcher.poisoning = False
        try:
            candidate = timer.measure(candidate_call, runs, warmup)
        except Exception as exc:
            raise classify_exception(exc, "timed run") from exc
        finally:
            if self.launcher is not None:
                self.launcher.poisoning = True
        self.counters["timed_runs"] += runs
        self.counters["warmup_runs"] += warmup
        self._check_not_cached(state, sets, candidate_call, outputs, runs + warmup)
        report = ShapeReport(
            shape=state.shape.name,
            runtime_ms=candidate.median_ms,
            runtime_spread_ms=candidate.iqr_ms,
            max_abs_error=state.history.max_abs_error,
            max_rel_error=state.history.max_rel_error,
        )
        if candidate.synced_median_ms is not None:
            self.notes.append(
                f"{state.shape.name}: candidate median {candidate.median_ms:.4f} ms on its stream, "
                f"{candidate.synced_median_ms:.4f} ms to device-wide sync"
            )
        if self.settings.measure_baselines:
            with torch.no_grad():
                eager = timer.measure(lambda i: state.model(*sets[i % k]), runs, warmup)
            report.baseline_ms = eager.median_ms
            report.compile_baseline_ms = self._compile_baseline(state, sets, timer, runs, warmup)
        if report.baseline_ms is not None and report.runtime_ms:
            report.speedup = report.baseline_ms / report.runtime_ms
        if report.compile_baseline_ms is not None and report.runtime_ms:
            report.speedup_vs_compile = report.compile_baseline_ms / report.runtime_ms
        return report

    def _timed_candidate(
        self, state: ShapeState, sets: list[list[Any]], expected: list[Any]
    ) -> tuple[Callable[[int], Any], list[Any] | None]:
        torch = self.torch
        k = len(sets)
        if state.candidate is not None:
            model = state.candidate

            def glue_call(i: int) -> Any:
                with torch.no_grad():
                    return model(*sets[i % k])

            return glue_call, None
        outputs = [torch.empty_like(e, memory_format=torch.contiguous_format) for e in expected]
        for out in outputs:
            comparison.poison_(out)
        inputs = [DescriptorArray(self._direct_inputs(state, s)) for s in sets]
        out_desc = DescriptorArray(outputs)
        unit, entry, stream = self.unit, self.request.kernel.entry_point, self._stream_handle
        assert unit is not None

        def direct_call(i: int) -> None:
            unit.call(entry, inputs[i % k], out_desc, stream())

        return direct_call, outputs

    def _check_not_cached(
        self,
        state: ShapeState,
        sets: list[list[Any]],
        call: Callable[[int], Any],
        outputs: list[Any] | None,
        n: int,
    ) -> None:
        """Fresh values written into the next input set, in place: the candidate must recompute."""
        torch = self.torch
        j = n % len(sets)
        fresh = self._instantiate(state.shape, CACHE_PROBE_SEED).inputs
        with torch.no_grad():
            for target, value in zip(sets[j], fresh, strict=True):
                if isinstance(target, torch.Tensor):
                    target.copy_(value)
        reference = self._high_precision(state, sets[j])
        try:
            with self._on_stream():
                result = call(n)
                got = outputs if outputs is not None else as_list(result, "ModelNew.forward")
                snapshots = [o.clone() for o in got] if self.is_cuda else None
            self._sync()
        except Exception as exc:
            raise classify_exception(exc, "verification call after timing") from exc
        if snapshots is not None and not all(
            comparison.bitwise_equal(s, o) for s, o in zip(snapshots, got, strict=True)
        ):
            raise EvaluationFailure(
                reasons.ASYNC_SIDE_STREAM,
                "the output changed after the call returned (work outside the stream)",
            )
        assert self.tolerance is not None
        for i, (out, ref) in enumerate(zip(got, reference, strict=True)):
            result = comparison.compare(out, ref, self.tolerance)
            if not result.ok:
                raise EvaluationFailure(
                    reasons.CACHED_RESULT,
                    f"after {n} calls rotating {len(sets)} input sets, new values written into input set {j} "
                    f"were not reflected in output {i}: {result.describe(self.tolerance)}",
                )

    def _compile_baseline(
        self, state: ShapeState, sets: list[list[Any]], timer: CpuTimer | CudaTimer, runs: int, warmup: int
    ) -> float | None:
        if not self.settings.compile_baseline_for(self.request.backend):
            return None
        torch = self.torch
        k = len(sets)
        try:
            compiled = torch.compile(state.model)
            with torch.no_grad():
                compiled(*sets[0])
                self._sync()
                return timer.measure(lambda i: compiled(*sets[i % k]), runs, warmup).median_ms
        except Exception as exc:  # torch.compile is best effort: no compiler, unsupported op ...
            self.notes.append(f"torch.compile baseline unavailable: {type(exc).__name__}: {str(exc)[:200]}")
            return None

    # ---- the whole evaluation ----------------------------------------------------------------------
    def _device_name(self) -> str:
        if self.is_cuda:
            with contextlib.suppress(Exception):
                return str(self.torch.cuda.get_device_name(self.torch.device(self.device)))
        return cpu_name()

    def run(self) -> EvaluationReport:
        if self.request.kernel.glue.strip():
            findings = check_glue(self.request.kernel.glue, self.task.reference_source)
            if findings:
                first = findings[0]
                raise EvaluationFailure(first.reason, f"line {first.line}: {first.message}")
        self._setup()
        shapes = list(self.task.shapes)
        seeds_per_shape = max(self.task.seeds, math.ceil(self.settings.correctness_trials / len(shapes)))
        states: list[ShapeState] = []
        keep_alive: list[Any] = []
        with self._on_stream():
            for index, shape in enumerate(shapes):
                state = self._shape_state(index, shape, self._instantiate(shape, TRIAL_SEED_BASE))
                states.append(state)
                for seed_index in range(seeds_per_shape):
                    self._trial(state, seed_index, TRIAL_SEED_BASE + seed_index, keep_alive)
            if self.launcher is not None and self.launcher.launches == 0:
                raise EvaluationFailure(
                    reasons.GLUE_NO_KERNEL_LAUNCH, "ModelNew.forward never called kf.launch during the trials"
                )
            self.failed_trial = {
                "shape": states[0].shape.name,
                "seed": STREAM_PROBE_SEED,
                "trial": "stream probe",
            }
            self._probe_outside_stream(states[0])  # before keep_alive is released: fresh addresses
            self.failed_trial = None
            keep_alive.clear()
            timer = self._timer()
            with QuietHost(self.settings.timing_lock_dir).timing():
                per_shape = [self._time_shape(state, timer) for state in states]
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
        if self.unit is not None:
            self.counters["kernel_launches"] = self.unit.launches
        return {
            "precision": f"{self.precision}; tolerance from {self.tolerance_source}"
            if self.precision
            else "",
            "tolerance_atol": tol.atol if tol else None,
            "tolerance_rtol": tol.rtol if tol else None,
            "device": self.device,
            "device_name": self._device_name(),
            "counters": dict(self.counters),
            "notes": list(self.notes),
        }

    def failure_report(self, failure: EvaluationFailure) -> EvaluationReport:
        return EvaluationReport.failure(
            failure.reason, failure.message, failed_trial=self.failed_trial, **self._common()
        )

    def device_health(self) -> EvaluationFailure | None:
        """On CUDA, whether the context still works; a broken one is reported and recycles the process."""
        if not self.is_cuda:
            return None
        try:
            self.torch.cuda.synchronize()
            self.torch.zeros(1, device=self.device).add_(1).item()
        except Exception as exc:
            return classify_exception(exc, "device after the evaluation")
        return None


def _is_float(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and value.dtype.is_floating_point


def run_evaluation(request: EvaluationRequest) -> EvaluationReport:
    """Evaluate in this process; always returns a report (see module docstring for where to call it)."""
    started = time.monotonic()
    evaluation: Evaluation | None = None
    try:
        evaluation = Evaluation(request)
        report = evaluation.run()
    except EvaluationFailure as failure:
        report = (
            evaluation.failure_report(failure)
            if evaluation
            else EvaluationReport.failure(failure.reason, failure.message)
        )
    except Exception as exc:  # a bug or an unexpected device state: never let it escape
        failure = classify_exception(exc, "evaluation")
        if failure.reason == reasons.GLUE_ERROR:
            failure = EvaluationFailure(reasons.WORKER_ERROR, f"{type(exc).__name__}: {exc}")
        report = (
            evaluation.failure_report(failure)
            if evaluation
            else EvaluationReport.failure(failure.reason, failure.message)
        )
    broken = evaluation.device_health() if evaluation is not None else None
    if broken is not None and evaluation is not None:
        if report.correct:
            report = evaluation.failure_report(broken)
        elif report.reason not in reasons.RECYCLING_REASONS:
            report.message = f"{report.message}; then {broken.message}"
            report.reason = broken.reason
    report.duration_s = time.monotonic() - started
    return report
