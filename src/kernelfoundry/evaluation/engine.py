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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kernelfoundry.evaluation import (
    baseline_cache,
    comparison,
    compiled_baselines,
    observation,
    reasons,
    roofline,
    screening,
    verification,
)
from kernelfoundry.evaluation.backends import Backend, backend_for_device
from kernelfoundry.evaluation.correctness import TrialHistory, check_trial
from kernelfoundry.evaluation.glue_checks import check_glue
from kernelfoundry.evaluation.reasons import EvaluationFailure, classify_exception
from kernelfoundry.evaluation.report import EvaluationReport, ShapeReport
from kernelfoundry.evaluation.runner_client import RunnerProcess
from kernelfoundry.evaluation.set_plan import plan_sets, sets_budget, working_memory
from kernelfoundry.evaluation.settings import EvaluationRequest
from kernelfoundry.evaluation.shared_memory import Arena, TensorSpec, dtype_name, layout
from kernelfoundry.evaluation.trial_cache import TrialCache, fingerprint, task_key
from kernelfoundry.stack.quiet_host import QuietHost
from kernelfoundry.tasks.model import ShapeVariant, TaskError, Tolerance
from kernelfoundry.tasks.reference import draw_inputs, instantiate

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


def _wide_bytes(tensors: list[Any]) -> int:
    """The bytes of the float64 copies the high-precision reference makes of these inputs."""
    return sum(t.numel() * 8 for t in tensors if _is_float(t) and t.element_size() < 8)


def _owned(outputs: list[Any], sources: list[Any]) -> list[Any]:
    """The reference's outputs, each cloned only where it shares memory with one of `sources` (an input
    or a parameter a forward returned), with an earlier output, or is a view of a larger temporary: a
    fresh output is kept as it is, since a clone of an 8 GB float64 answer needs 16 GB more at the peak."""
    import torch

    seen = {t.untyped_storage().data_ptr() for t in sources if isinstance(t, torch.Tensor) and t.numel()}
    owned = []
    for out in outputs:
        storage = out.untyped_storage()
        whole = storage.nbytes() == out.numel() * out.element_size()
        if storage.data_ptr() in seen or not whole:
            out = out.clone()
        seen.add(out.untyped_storage().data_ptr())
        owned.append(out)
    return owned


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
    """One input set: the values the judge computes on, and how the runner gets the same.

    Shared or staged memory (`arena`): judge-owned memory the runner maps (CPU) or copies to its
    device (staged). Drawn (`arena` None, staged devices whose get_inputs() draws reproducibly): the
    runner draws the set itself on its device from the judge's seed, and the judge draws its own copy
    only when it needs the values (a checked call): nothing crosses the host."""

    arena: Arena | None
    specs: list[TensorSpec]  # where the set's tensors lie in the arena, in input order
    host: list[Any] | None  # tensors viewing the arena; Python scalars as get_inputs() gave them
    values: list[Any]  # what reference and eager use: the host views (CPU) or device tensors (GPU)
    seed: int
    reference: list[Any] | None = None  # cached for the current values
    proxy: list[Any] | None = None  # the proxy reference of the current values, from a proxy check
    previous_reference: list[Any] | None = None  # the answer for the values before the last refresh
    refreshed_since_check: bool = False
    pending_seed: int | None = None  # drawn sets: the runner's values are this seed's, not yet ours


@dataclass
class ShapeState:
    """Everything built once per shape variant."""

    index: int
    shape: ShapeVariant
    model: Any
    reference_model: Any
    history: TrialHistory
    module: Any  # the task's reference module (get_inputs() draws the timed calls' fresh values)
    sets: list[InputSet] = field(default_factory=list)
    trial_sets: int = 0
    timing_start: int = 0  # the first of the timing sets (0 where the trials share it: set_plan.py)
    expected: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)  # outputs: dtype, shape
    outputs: list[Any] = field(default_factory=list)  # judge views of the output arena
    lent_outputs: list[Any] = field(default_factory=list)  # judge views of lent device memory (or none)
    arenas: list[Arena] = field(default_factory=list)
    drawn: bool = False  # the runner draws the input sets from seeds (InputSet)
    lean: bool = False  # memory is short (set_plan.py): references are not kept past their use
    trial_key: str = ""  # the task's entry in the judge's trial cache ("": not kept, trial_cache.py)
    trial_seeds: tuple[int, ...] = ()  # the seeds whose references that entry keeps
    traffic: roofline.Traffic | None = None  # bytes and FLOPs of one forward (roofline.py)


class Evaluation:
    """One request, judged step by step; the candidate runs in `runner`."""

    def __init__(
        self,
        request: EvaluationRequest,
        runner_factory: Callable[[], RunnerProcess],
        before_timing: Callable[[], None] | None = None,
        trial_cache: TrialCache | None = None,
    ) -> None:
        """`before_timing`: called once the trials have passed, before anything is timed (the judge's
        runner pool waits there for the next candidate's runner to finish starting). `trial_cache`: the
        judge's trial seeds and kept references across candidates (trial_cache.py)."""
        import torch

        self.torch = torch
        self.request = request
        self.task = request.task
        self.settings = request.settings
        self.backend: Backend = backend_for_device(request.device)
        self.staged = self.backend.memory == "staged"
        self.device = self.backend.judge_device(request.device, self.settings.flush_cache)
        self.runner_factory = runner_factory
        self.before_timing = before_timing
        self.trial_cache = trial_cache
        self.runner: RunnerProcess | None = None
        self.states: list[ShapeState] = []
        self.arenas: list[Arena] = []  # every memfd of this evaluation, closed at the end
        self.pinned: list[int] = []  # arena addresses page-locked for staged copies, unpinned at the end
        self.lent: list[Any] = []  # device memory lent to the runner for outputs, released at the end
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
            "timing_remeasured": 0,  # shapes whose timing cross-check had to measure again
            "screen_runs": 0,
            "proxy_checks": 0,  # checked timed calls the proxy reference decided (comparison.py)
            "proxy_escalations": 0,  # ... it could not: the high-precision reference did
            "device_fetches": 0,  # staged outputs read through lent device memory, not the host
            "kept_references": 0,  # trial references the judge had kept from an earlier candidate
            "watched_idle_windows": 0,  # idle windows after timed replies the judge watched (sampled)
        }
        self.screened = False
        self.phases: dict[str, float] = {}  # seconds of this evaluation per step (report.phases_ms)

    @contextlib.contextmanager
    def _phase(self, name: str) -> Any:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - started

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
        """One round trip; the judge's own watch around it (the idle window after a timed reply, the
        scan for processes the runner started) also shown apart in the phases, inside the step's."""
        runner = self.runner
        assert runner is not None
        idle, watch, windows = runner.idle_window_s, runner.process_watch_s, runner.watched_windows
        try:
            return runner.request(op, expected, self.deadline, fds, **fields)
        finally:
            self.counters["watched_idle_windows"] += runner.watched_windows - windows
            for name, before, after in (
                ("idle_window", idle, runner.idle_window_s),
                ("process_watch", watch, runner.process_watch_s),
            ):
                self.phases[name] = self.phases.get(name, 0.0) + after - before

    # ---- buffers -----------------------------------------------------------------------------------
    def _arena(self, size: int, name: str, pin: bool = True) -> Arena:
        arena = Arena.create(size, name)
        self.arenas.append(arena)
        if pin:
            self._pin(arena)
        return arena

    def _pin(self, arena: Arena) -> None:
        """Page-lock a staged device's host buffer (copies through it run at the link's speed)."""
        if self.staged and self.device.pin(arena.address(), arena.size):
            self.pinned.append(arena.address())

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
        arena.seal()  # only the judge's own mapping writes it from now on (shared_memory.py)
        values = list(inputs) if self.staged else host
        return InputSet(arena, specs, host, values, seed)

    def _set_message(self, input_set: InputSet) -> list[dict[str, Any]]:
        torch = self.torch
        assert input_set.host is not None
        items: list[dict[str, Any]] = []
        offset_specs = iter(input_set.specs)
        for value in input_set.host:
            if isinstance(value, torch.Tensor):
                items.append({"tensor": next(offset_specs).to_json()})
            else:
                items.append({"scalar": _json_scalar(value, "an input")})
        return items

    def _draw(self, state: ShapeState, seed: int) -> list[Any]:
        try:
            return draw_inputs(state.module, state.shape, seed, self.request.device)
        except TaskError as exc:
            raise EvaluationFailure(reasons.REFERENCE_ERROR, str(exc)) from exc

    def _write_tensors(self, targets: list[Any], fresh: list[Any]) -> None:
        """Fresh tensor contents into existing tensors (Python scalars stay as the set first had them)."""
        torch = self.torch
        with torch.no_grad():
            for target, value in zip(targets, fresh, strict=True):
                if isinstance(value, torch.Tensor):
                    target.copy_(value)

    def _refresh(self, state: ShapeState, input_set: InputSet) -> int | None:
        """Fresh values from the task's own get_inputs() (so they keep whatever structure the task
        gives its inputs) for the set the runner already knows: written in place into its memory, or,
        for a drawn set, a new seed the runner draws from (returned; the judge draws the same values
        only when it needs them). The answer for the old values is kept only where it was computed
        anyway (a checked call): computing it for every refresh would cost a reference per timed call."""
        answer = input_set.reference if input_set.reference is not None else input_set.proxy
        input_set.previous_reference = None if state.lean else answer
        input_set.reference = input_set.proxy = None
        input_set.refreshed_since_check = True
        seed = random_seed()
        input_set.seed = seed
        if state.drawn:
            input_set.pending_seed = seed
            return seed
        assert input_set.host is not None
        fresh = self._draw(state, seed)
        self._write_tensors(input_set.host, fresh)
        if self.staged:
            self._write_tensors(input_set.values, fresh)
        return None

    def _values(self, state: ShapeState, input_set: InputSet) -> list[Any]:
        """The set's current values on the judge's side (a drawn set's pending seed drawn now)."""
        if input_set.pending_seed is not None:
            self._write_tensors(input_set.values, self._draw(state, input_set.pending_seed))
            input_set.pending_seed = None
        return input_set.values

    def _shape_state(self, index: int, shape: ShapeVariant, seeds_per_shape: int) -> ShapeState:
        torch = self.torch
        key = ""
        if self.trial_cache is not None:
            key = task_key(self.task.reference_source, shape.name, shape.overrides, self.request.device)
        kept_seeds = self.trial_cache.seeds(key) if self.trial_cache is not None else None
        first_seed = kept_seeds[0] if kept_seeds else random_seed()
        instance = self._instantiate(shape, first_seed)
        reference_model = copy.deepcopy(instance.model).to(torch.float64)
        state = ShapeState(
            index, shape, instance.model, reference_model, TrialHistory(index, shape.name), instance.module
        )
        with self.device.working_memory() as working:  # the forward's temporaries (set_plan.py)
            eager, flops = roofline.count_flops(lambda: self._eager(state, instance.inputs))
        temporaries = working[0] if working else 0
        if temporaries >= 1 << 28:  # cached, they are no use to the runner: free memory is read next
            self.device.release_memory()
        input_tensors = [v for v in instance.inputs if isinstance(v, torch.Tensor)]
        tensors = [*input_tensors, *instance.model.parameters(), *instance.model.buffers(), *eager]
        state.traffic = roofline.Traffic(roofline.bytes_of(tensors), flops)
        state.expected = [(dtype_name(e.dtype), tuple(e.shape)) for e in eager]
        plan = plan_sets(
            seeds_per_shape,
            self.settings.input_sets,
            roofline.bytes_of(input_tensors),
            sum(e.numel() * 8 for e in eager),  # the float64 reference of one set
            self._sets_budget(working_memory(temporaries, _wide_bytes(input_tensors))),
            copies=2 if self.staged else 1,
        )
        del eager
        state.lean = plan.lean
        if plan.note:
            self.notes.append(f"{shape.name}: {plan.note}")
        seeds = [first_seed] + [random_seed() for _ in range(plan.trial_sets - 1)]
        if self.trial_cache is not None and not plan.lean and plan.trial_sets == seeds_per_shape:
            parameters = fingerprint(list(instance.model.parameters()) + list(instance.model.buffers()))
            if (
                kept_seeds
                and len(kept_seeds) == len(seeds)
                and self.trial_cache.parameters_match(key, parameters)
            ):
                seeds = kept_seeds
            else:  # a new task, or its model drew other weights from the same seed: start again
                self.trial_cache.start(key, seeds, parameters)
            state.trial_key, state.trial_seeds = key, tuple(seeds)
        state.trial_sets = len(seeds)
        state.timing_start = 0 if plan.shared else len(seeds)
        timing_seeds = [random_seed() for _ in range(plan.held - len(seeds))]
        state.drawn = self.staged and self._draws_reproducibly(state, instance.inputs, first_seed)
        if self.staged and not state.drawn:
            self.notes.append(
                f"{shape.name}: get_inputs() gives other values for the same seed (a draw outside "
                "torch's generator?); the input sets were staged through the host"
            )
        for seed in seeds + timing_seeds:
            inputs = instance.inputs if seed == first_seed else self._draw(state, seed)
            state.sets.append(self._drawn_set(inputs, seed) if state.drawn else self._new_set(inputs, seed))
        out_specs, out_size = layout(state.expected)
        # pinned only where outputs come through the host (pinning faults in every page of it)
        output_arena = self._arena(out_size, "kf-outputs", pin=not self._lends)
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
        param_arena.seal()
        glue = bool(self.request.kernel.glue.strip())
        direct = [n for n, _ in instance.model.named_parameters()] + [
            n for n, _ in instance.model.named_buffers()
        ]
        binding = {
            "shape": index,
            "params": [{"name": n, "tensor": s.to_json()} for n, s in zip(names, param_specs, strict=True)],
            "direct_params": direct,
            "outputs": [s.to_json() for s in out_specs],
            "init_inputs": _json_scalar(list(instance.init_inputs), "an init input") if glue else [],
        }
        if state.drawn:
            if self._bind(state, binding, [param_arena, output_arena], draw=True):
                self.notes.append(
                    f"{shape.name}: input sets drawn on the device by the runner from the judge's seeds "
                    "(get_inputs() draws reproducibly; the fingerprints of both draws agreed)"
                )
                return state
            self.notes.append(
                f"{shape.name}: the runner's draws of the input sets differed from the judge's; the sets "
                "were staged through the host instead"
            )
            state.drawn = False
            for i, input_set in enumerate(state.sets):
                state.sets[i] = self._new_set(input_set.values, input_set.seed)
        self._bind(state, binding, [param_arena, output_arena], draw=False)
        return state

    def _sets_budget(self, working_bytes: int = 0) -> int | None:
        configured = os.environ.get("KF_EVALUATION_SETS_MEMORY_BYTES")
        free = None if configured else self.device.free_memory_bytes()
        try:
            return sets_budget(free, configured, working_bytes)
        except ValueError as exc:
            raise EvaluationFailure(reasons.WORKER_ERROR, str(exc)) from exc

    def _draws_reproducibly(self, state: ShapeState, first: list[Any], seed: int) -> bool:
        """Whether get_inputs() gives the same values for the same seed (a second draw compared)."""
        torch = self.torch
        again = self._draw(state, seed)
        if len(again) != len(first):
            return False
        for a, b in zip(first, again, strict=True):
            if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
                return False
            if isinstance(a, torch.Tensor) and not comparison.bitwise_equal(a, b):
                return False
            if not isinstance(a, torch.Tensor) and a != b:
                return False
        return True

    def _drawn_set(self, inputs: list[Any], seed: int) -> InputSet:
        torch = self.torch
        values = [x.contiguous() if isinstance(x, torch.Tensor) else x for x in inputs]
        return InputSet(None, [], None, values, seed)

    def _drawn_message(self, input_set: InputSet) -> list[dict[str, Any]]:
        torch = self.torch
        return [
            {"drawn": {"dtype": dtype_name(v.dtype), "shape": list(v.shape)}}
            if isinstance(v, torch.Tensor)
            else {"scalar": _json_scalar(v, "an input")}
            for v in input_set.values
        ]

    def _bind(self, state: ShapeState, binding: dict[str, Any], arenas: list[Arena], draw: bool) -> bool:
        """Send the shape's buffers; drawn sets: whether the runner's draws match the judge's."""
        torch = self.torch
        set_arenas = [] if draw else [s.arena for s in state.sets]
        state.arenas = [a for a in set_arenas if a is not None] + arenas
        fds = tuple(a.fd for a in state.arenas)
        extra: dict[str, Any] = {}
        lent = self._lend(arenas[-1].size)  # the output arena's layout, in device memory
        if lent is not None:
            extra["lent_outputs"] = {"size": lent.size}
            fds += (lent.fd,)
        if draw:
            extra["draw"] = {
                "source": self.task.reference_source,
                "overrides": dict(state.shape.overrides),
                "shape_name": state.shape.name,
                "seeds": [s.seed for s in state.sets],
            }
            sets = [self._drawn_message(s) for s in state.sets]
        else:
            sets = [self._set_message(s) for s in state.sets]
        reply, _ = self._ask(
            "bind",
            "bound",
            fds=fds,
            sets=sets,
            sizes=[a.size for a in state.arenas],
            **binding,
            **extra,
        )
        state.lent_outputs = []
        if lent is not None and reply.lent:
            state.lent_outputs = [lent.tensor(TensorSpec.from_json(o)) for o in binding["outputs"]]
            for out in state.lent_outputs:  # fresh device memory holds whatever it held
                comparison.poison_(out)
            self.device.synchronize()
        elif self._lends:
            self._pin(arenas[-1])
            if lent is not None:
                self.notes.append(
                    f"{state.shape.name}: the runner could not map the device memory lent for its outputs "
                    f"({reply.lent_error or 'no reason given'}); outputs were fetched through the host"
                )
        if not draw:
            return True
        tensors = [[v for v in s.values if isinstance(v, torch.Tensor)] for s in state.sets]
        expected = [[comparison.content_digest(v) for v in values] for values in tensors]
        return list(reply.digests) == expected

    @property
    def _lends(self) -> bool:
        """Whether outputs are to come through lent device memory (staged devices, where it works)."""
        return self.staged and self.settings.lend_outputs

    def _lend(self, nbytes: int) -> Any:
        """Device memory for a shape's outputs that the runner maps (staged devices that can lend)."""
        if not self._lends:
            return None
        lent = self.device.lend(nbytes)
        if lent is not None:
            self.lent.append(lent)
        return lent

    # ---- the judge's own computations ----------------------------------------------------------------
    def _high_precision(self, state: ShapeState, inputs: list[Any]) -> list[Any]:
        """The reference in float64 (TF32 off); float32 with TF32 off where float64 is unsupported."""
        torch = self.torch
        try:
            with self._tf32_off(), torch.no_grad(), self.device.on_stream():
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
        self.reference_dtype = ref_dtype
        model = state.reference_model
        result = _owned([o.detach() for o in outputs], [*wide, *model.parameters(), *model.buffers()])
        if state.lean:
            # Memory is short: the float64 copies of the inputs and the forward's temporaries go back to
            # the driver now, not at the evaluation's end, or the runner's next call (its own outputs,
            # a glue's temporaries) finds the device full of this judge's cached blocks.
            del outputs, wide
            self.device.release_memory()
        return result

    def _eager(self, state: ShapeState, inputs: list[Any]) -> list[Any]:
        try:
            with self.torch.no_grad(), self.device.on_stream():
                return as_list(state.model(*inputs), "the reference")
        except EvaluationFailure:
            raise
        except Exception as exc:
            raise EvaluationFailure(reasons.REFERENCE_ERROR, f"reference forward failed: {exc}") from exc

    @contextlib.contextmanager
    def _tf32_off(self) -> Any:
        """torch's TF32 switches (matmul and cuDNN) off for the block, restored after it."""
        backends = self.torch.backends
        tf32 = (backends.cuda.matmul.allow_tf32, backends.cudnn.allow_tf32)
        backends.cuda.matmul.allow_tf32 = backends.cudnn.allow_tf32 = False
        try:
            yield
        finally:
            backends.cuda.matmul.allow_tf32, backends.cudnn.allow_tf32 = tf32

    def _proxy(self, state: ShapeState, inputs: list[Any], eager: list[Any] | None = None) -> list[Any]:
        """The proxy reference: the task's model in its own dtype on the device, TF32 off (`eager`
        itself where TF32 is off already: on the CPU, or with torch's flags both off)."""
        backends = self.torch.backends
        tf32_on = backends.cuda.matmul.allow_tf32 or backends.cudnn.allow_tf32
        if eager is not None and (self.request.device == "cpu" or not tf32_on):
            return eager
        with self._tf32_off():
            return [o.detach() for o in self._eager(state, inputs)]

    def _proxy_decides(self, state: ShapeState, input_set: InputSet, outputs: list[Any]) -> bool:
        """A checked timed call passed on the proxy reference (comparison.passes_by_proxy), sparing the
        high-precision one; False leaves the decision to it."""
        history = state.history
        if not self.settings.proxy_checks or history.proxy_error is None or input_set.reference is not None:
            return False
        assert self.tolerance is not None
        if not comparison.proxy_can_decide(self.tolerance, history.proxy_error):
            self.counters["proxy_escalations"] += 1  # too coarse a proxy: no forward spent on it
            return False
        proxy = self._proxy(state, self._values(state, input_set))
        for out, want in zip(outputs, proxy, strict=True):
            # a poisoned (NaN) element left unwritten is undecided here: the reference's check names it
            if not comparison.passes_by_proxy(
                out, want, self.tolerance, history.proxy_error, history.error_floor
            ):
                self.counters["proxy_escalations"] += 1
                return False
        self.counters["proxy_checks"] += 1
        if not state.lean:  # the answer for these values, should a later refresh be ignored
            input_set.proxy = proxy
        return True

    def _reference_for(self, state: ShapeState, input_set: InputSet) -> list[Any]:
        if input_set.reference is None:
            values = self._values(state, input_set)
            kept = self.trial_cache if input_set.seed in state.trial_seeds else None
            prints = fingerprint(values) if kept is not None else ()
            reference = kept.reference(state.trial_key, input_set.seed, prints) if kept is not None else None
            if reference is not None:
                self.counters["kept_references"] += 1
                input_set.reference = [r.to(self.request.device, copy=True) for r in reference]
                wide = any(_is_float(r) and r.dtype == self.torch.float64 for r in reference)
                self.reference_dtype = "float64" if wide else "float32 (TF32 off)"
            else:
                input_set.reference = self._high_precision(state, values)
                if kept is not None:
                    kept.keep(state.trial_key, input_set.seed, prints, input_set.reference)
        return input_set.reference

    # ---- calls -------------------------------------------------------------------------------------
    def _poison_outputs(self, state: ShapeState) -> None:
        """Shared memory and lent device memory: the judge poisons the outputs itself, done before the
        call (staged through the host: the runner does, on its device)."""
        if not self.staged:
            for out in state.outputs:
                comparison.poison_(out)
        elif state.lent_outputs:
            for out in state.lent_outputs:
                comparison.poison_(out)
            self.device.synchronize()

    def _call(
        self, state: ShapeState, set_index: int, trial: bool, refresh: bool = False, seed: int | None = None
    ) -> tuple[Any, int]:
        """One call of the candidate on set `set_index` (outputs already poisoned); `seed`: a drawn
        set's fresh values, drawn by the runner before the call."""
        fields: dict[str, Any] = {"refresh_seed": seed} if seed is not None else {}
        reply, wall = self._ask(
            "call", "called", shape=state.index, set=set_index, trial=trial, refresh=refresh, **fields
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
        with self._phase("fetch"):
            if state.lent_outputs:
                # the candidate wrote into the judge's memory during the call: read without asking, so
                # the runner never learns which calls are checked; a snapshot, done before the next call
                # (whose poisoning synchronises after it), is what the judge decides on
                self.counters["device_fetches"] += 1
                return [o.clone() for o in state.lent_outputs]
            # the runner's device -> page-locked host -> the judge's device
            self._ask("fetch", "fetched", shape=state.index)
            return [o.to(self.request.device) for o in state.outputs]

    # ---- correctness -------------------------------------------------------------------------------
    def _trial(self, state: ShapeState, seed_index: int) -> None:
        """Trial `seed_index` on a fresh input set: a held trial set the first time it is used, and the
        same set refreshed with a new seed after that (set_plan.py: fewer sets where memory is short).
        Its steps are timed apart (the `trial_*` phases, inside `trials`)."""
        set_index = seed_index % state.trial_sets
        input_set = state.sets[set_index]
        seed = None
        with self._phase("trial_inputs"):
            if seed_index >= state.trial_sets:
                seed = self._refresh(state, input_set)
            self.failed_trial = {
                "shape": state.shape.name,
                "seed": input_set.seed,
                "trial": self.counters["trials"],
            }
            inputs = self._values(state, input_set)
        with self._phase("trial_reference"):
            reference = self._reference_for(state, input_set)
        with self._phase("trial_eager"):
            eager = self._eager(state, inputs)
            eager_error = max(comparison.max_abs_error(e, r) for e, r in zip(eager, reference, strict=True))
            dtype = eager[0].dtype
            self.tolerance, self.tolerance_source = comparison.effective_tolerance(
                dtype, eager_error, self.task.tolerance, self.settings.tolerance
            )
            state.history.error_floor = max(state.history.error_floor, 2.0 * eager_error)
            state.history.eager_degenerate = [
                comparison.is_degenerate(e, r) for e, r in zip(eager, reference, strict=True)
            ]
            if state.lean:
                # Memory is short: from here only eager's layout is used (check_trial), so its values go
                # before the proxy's forward and the call (level1/19 on an 80 GB card: the sets, the lent
                # outputs, their snapshot, the float64 reference, the previous one and eager's 6.4 GB
                # output left the judge 1 GB for its checks)
                eager = [e.to("meta") for e in eager]
        if self.settings.proxy_checks:
            with self._phase("trial_proxy"):
                proxy = self._proxy(state, inputs, None if state.lean else eager)
                proxy_error = max(
                    comparison.max_abs_error(p, r) for p, r in zip(proxy, reference, strict=True)
                )
                state.history.proxy_error = max(state.history.proxy_error or 0.0, proxy_error)
                del proxy
        self.precision = f"{self.reference_dtype} reference, compared in {str(dtype).replace('torch.', '')}"
        self.counters["trials"] += 1
        # the evaluation's first call apart: it also pays what a process pays on first use
        with self._phase("trial_first_call" if self.counters["trials"] == 1 else "trial_call"):
            self._poison_outputs(state)
            self._call(state, set_index, trial=True, refresh=seed_index >= state.trial_sets, seed=seed)
        outputs = self._read_outputs(state)
        with self._phase("trial_check"):
            check_trial(state.history, seed_index, outputs, eager, reference, self.tolerance)
        state.history.passed_seeds.append(seed_index)
        with self._phase("trial_keep"):  # a sample of it, for the next trial's stale-output check
            state.history.remember(reference)
        if state.lean:
            input_set.reference = None

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
        self.counters["checked_timed_runs"] += 1
        if self._proxy_decides(state, input_set, outputs):
            input_set.refreshed_since_check = False
            return
        reference = self._reference_for(state, input_set)
        refreshed = input_set.refreshed_since_check
        input_set.refreshed_since_check = False
        for i, (out, ref) in enumerate(zip(outputs, reference, strict=True)):
            unwritten = comparison.unwritten(out, ref)
            if unwritten.count:
                raise EvaluationFailure(
                    reasons.OUTPUT_NOT_WRITTEN,
                    f"timed call {call}: output {i} has {unwritten.count} of {out.numel()} "
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
        error = state.history.proxy_error
        if self.settings.proxy_checks and error is not None:
            self.notes.append(
                f"{state.shape.name}: proxy reference's error against float64 in the trials {error:.3g} "
                f"(proxy checks decide with a margin of {comparison.PROXY_ERROR_MARGIN * error:.3g})"
            )
        first = state.timing_start
        k = len(state.sets) - first
        self.counters["input_sets"] += k
        with self._phase("timed_runs"):
            claims, walls = self._timed_calls(state, verification.plan_calls(warmup + runs, k), warmup)
        self.counters["timed_runs"] += runs
        self.counters["warmup_runs"] += warmup
        self.failed_trial = {"shape": state.shape.name, "seed": None, "trial": "timing cross-check"}
        with self._phase("cross_check"):
            check = self._cross_check(state, claims, walls)
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

    def _screened_out(self, states: list[ShapeState]) -> list[ShapeReport] | None:
        """The screen (screening.py): per-shape reports when the candidate cannot matter, else None."""
        above, margin = self.settings.screen_above_ms, self.settings.screen_margin_for(self.backend.name)
        if above <= 0:
            return None
        from kernelfoundry.evaluation.timing import Timings

        reports = []
        with self._phase("screen"):
            for state in states:
                k = len(state.sets) - state.timing_start
                plan = verification.plan_calls(screening.SCREEN_WARMUP + screening.SCREEN_CALLS, k)
                claims, _ = self._timed_calls(state, plan, screening.SCREEN_WARMUP)
                self.counters["screen_runs"] += screening.SCREEN_CALLS
                timings = Timings(tuple(c / 1e6 for c in claims))
                reports.append(
                    ShapeReport(
                        shape=state.shape.name,
                        runtime_ms=timings.median_ms,
                        runtime_spread_ms=timings.iqr_ms,
                        max_abs_error=state.history.max_abs_error,
                        max_rel_error=state.history.max_rel_error,
                    )
                )
        self.failed_trial = None
        screen_ms = sum(r.runtime_ms or 0.0 for r in reports)
        if screening.needs_full_protocol(screen_ms, above, margin):
            self.notes.append(
                f"screen: {screen_ms:.4f} ms, within {margin:.0%} of the {above:.4f} ms to beat: "
                "timed in full"
            )
            return None
        self.screened = True
        self.notes.append(
            f"screened out: {screen_ms:.4f} ms (median of {screening.SCREEN_CALLS} verified calls per shape) "
            f"is more than {1 + margin:.2f} x the {above:.4f} ms to beat; not timed in full"
        )
        return reports

    def _timed_calls(
        self, state: ShapeState, plan: list[verification.PlannedCall], warmup: int
    ) -> tuple[list[int], list[int]]:
        """The scheduled calls: claimed times and the judge's round trips of the calls after warm-up."""
        first = state.timing_start
        claims: list[int] = []
        walls: list[int] = []
        assert self.runner is not None
        self.runner.watch_schedule(len(plan))
        for n, planned in enumerate(plan):
            self.failed_trial = {"shape": state.shape.name, "seed": None, "trial": f"timed call {n}"}
            input_set = state.sets[first + planned.input_set]
            seed = None
            if planned.refresh:
                with self._phase("refresh"):
                    seed = self._refresh(state, input_set)
                self.counters["refreshed_timed_runs"] += 1
            self._poison_outputs(state)
            self.device.flush_cache()
            reply, wall = self._call(
                state, first + planned.input_set, trial=False, refresh=planned.refresh, seed=seed
            )
            verification.check_claim(reply.claimed_ns, wall, n)
            if n >= warmup:
                claims.append(reply.claimed_ns)
                walls.append(wall)
            if planned.check:
                with self._phase("checks"):
                    self._check_timed_outputs(state, input_set, n)
        return claims, walls

    def _cross_check(self, state: ShapeState, claims: list[int], walls: list[int]) -> verification.CrossCheck:
        first = state.timing_start
        k = len(state.sets) - first
        calls = verification.batch_calls(statistics.median(claims), statistics.median(walls))
        order = [first + (i % k) for i in range(calls)]
        nulls = [self._ask("idle", "idle")[1] for _ in range(NULL_CALLS)]
        batches = [
            self._ask("batch", "batch_done", shape=state.index, sets=order)[1]
            for _ in range(verification.BATCH_REPEATS)
        ]
        allowance = self.backend.call_overhead_allowance_ns
        try:
            check = verification.cross_check(claims, batches, calls, nulls, allowance)
        except EvaluationFailure:
            # A refusal must reproduce: measured again, with what the scheduler did (verification.py).
            self.counters["timing_remeasured"] += 1
            nulls = [self._ask("idle", "idle")[1] for _ in range(NULL_CALLS)]
            observed = [self._observed_batch(state, order) for _ in range(verification.BATCH_REPEATS)]
            check = verification.contention_cross_check(claims, observed, nulls, allowance, self._threads())
        return check

    def _observed_batch(self, state: ShapeState, order: list[int]) -> verification.BatchObservation:
        """One batch, with the run-queue waits of the runner's threads and of the judge's own thread,
        the runner's CPU time, and the CPU time every other process used meanwhile (/proc)."""
        assert self.runner is not None
        runner, judge = self.runner.pid, os.getpid()
        me = threading.get_native_id()
        excluded = frozenset({runner, judge})
        outsiders_before = observation.other_tasks_cpu_ns(excluded)
        threads_before = observation.thread_schedule_ns(runner)
        process_before = observation.process_cpu_ns(runner)
        judge_before = observation.thread_schedule_ns(judge).get(me, (0, 0))[1]
        wall = self._ask("batch", "batch_done", shape=state.index, sets=order)[1]
        judge_after = observation.thread_schedule_ns(judge).get(me, (0, 0))[1]
        threads_after = observation.thread_schedule_ns(runner)
        process_after = observation.process_cpu_ns(runner)
        outsiders_after = observation.other_tasks_cpu_ns(excluded)
        spent = {
            tid: (cpu - threads_before.get(tid, (0, 0))[0], waited - threads_before.get(tid, (0, 0))[1])
            for tid, (cpu, waited) in threads_after.items()
        }
        per_thread = sum(cpu for cpu, _ in spent.values())
        # threads that ran and ended inside the batch show only in the process's coarse figure
        coarse = process_after - process_before - 2 * observation.TICK_NS
        return verification.BatchObservation(
            wall_ns=wall,
            calls=len(order),
            runner_waited_ns=max((waited for _, waited in spent.values()), default=0),
            judge_waited_ns=max(0, judge_after - judge_before),
            outsiders_cpu_ns=observation.cpu_used_between(outsiders_before, outsiders_after),
            busiest_thread_cpu_ns=max((cpu for cpu, _ in spent.values()), default=0),
            runner_cpu_ns=max(per_thread, coarse),
        )

    def _time_baselines(self, state: ShapeState, report: ShapeReport) -> None:
        """Eager and torch.compile, timed in the judge (no candidate ever ran here) on the timing sets,
        or reused from an earlier candidate of the same task, shape and protocol while younger than
        the settings allow (baseline_cache.py; the report says their age).

        The host heap is kept mapped while they run (allocator.steady_heap): eager's per-op allocations
        otherwise page-fault on some evaluations and not on others, by the heap's layout alone."""
        if not self.settings.measure_baselines:
            return
        runs, warmup = self.settings.runs_for(self.backend.name), self.settings.warmup_runs
        with_compile = self.settings.compile_baseline_for(self.backend.name)
        key = baseline_cache.cache_key(
            self.task.reference_source,
            sorted(state.shape.overrides.items()),
            self.request.device,
            runs,
            warmup,
            self.settings.flush_cache,
            with_compile,
            self._threads(),
        )
        now = time.monotonic()
        baselines = baseline_cache.fresh(key, self.settings.baseline_reuse_for(self.backend.name), now)
        if baselines is None:
            baselines = self._measure_baselines(state, runs, warmup, with_compile)
            baseline_cache.remember(key, baselines)
        report.baseline_ms = baselines.eager_ms
        report.compile_baseline_ms = baselines.compile_ms
        report.baseline_age_s = round(max(0.0, now - baselines.measured_at), 3)  # 0: measured just now
        if baselines.compile_note:
            self.notes.append(f"torch.compile baseline unavailable: {baselines.compile_note}")
        if report.baseline_age_s:
            self.notes.append(
                f"{state.shape.name}: eager and torch.compile timings reused from "
                f"{report.baseline_age_s:.0f} s ago (same task, shape, device and protocol)"
            )
        if report.baseline_ms is not None and report.runtime_ms:
            report.speedup = report.baseline_ms / report.runtime_ms
        if report.compile_baseline_ms is not None and report.runtime_ms:
            report.speedup_vs_compile = report.compile_baseline_ms / report.runtime_ms

    def _measure_baselines(
        self, state: ShapeState, runs: int, warmup: int, with_compile: bool
    ) -> baseline_cache.TimedBaselines:
        from kernelfoundry.evaluation.allocator import steady_heap

        torch = self.torch
        timer = self.device.baseline_timer()
        sets = [self._values(state, s) for s in state.sets[state.timing_start :]]
        k = len(sets)
        compile_ms: float | None = None
        note = ""
        with steady_heap():
            with torch.no_grad():
                eager_ms = timer.measure(lambda i: state.model(*sets[i % k]), runs, warmup).median_ms
            if with_compile:
                key = compiled_baselines.cache_key(
                    self.request.task.reference_source, state.shape.overrides, self.request.device
                )
                try:
                    compiled = compiled_baselines.compiled_reference(key, lambda: torch.compile(state.model))
                    with torch.no_grad():
                        compiled(*sets[0])
                        self.device.synchronize()
                        compile_ms = timer.measure(lambda i: compiled(*sets[i % k]), runs, warmup).median_ms
                except Exception as exc:  # best effort: no compiler, unsupported op ...
                    failure = exc if isinstance(exc, compiled_baselines.CompileFailed) else None
                    if failure is None:
                        failure = compiled_baselines.CompileFailed(f"{type(exc).__name__}: {str(exc)[:200]}")
                        compiled_baselines.remember(key, failure)
                    note = str(failure)
        return baseline_cache.TimedBaselines(eager_ms, compile_ms, note, time.monotonic())

    def _finish_runner(self) -> None:
        """Kill the runner; a process it left behind (its group, or reparented to the judge) fails it."""
        if self.runner is None:
            return
        known = self.runner._judge_children_before
        self.notes.extend(self.runner.notes)  # idle windows over their allowance that a re-check cleared
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
        # Other evaluations' timed runs and this one's trials take turns, as do this one's timed runs and
        # other work (quiet_host.py). The two waits together take at most the deadline (the worker
        # allows a judge with a timing lock twice its deadline) and neither counts against the candidate.
        quiet = QuietHost(self.settings.timing_lock_dir)
        allowed = self.settings.deadline_s
        started = time.monotonic()
        with quiet.sharing(wait_s=allowed) as shared:
            self.phases["trials_wait"] = waited = time.monotonic() - started
            self._quiet_note(shared, "the trials ran beside another evaluation's timed runs")
            states = self._correctness_stage()
        started = time.monotonic()
        with quiet.timing(wait_s=max(0.0, allowed - waited)) as exclusive:
            self.phases["timing_wait"] = time.monotonic() - started
            self.deadline += self.phases["timing_wait"]
            self._quiet_note(exclusive, "timed beside other work")
            per_shape = self._screened_out(states)
            if per_shape is None:
                per_shape = [self._time_candidate(state) for state in states]
            self._finish_runner()
            with self._phase("baselines"):
                for state, report in zip(states, per_shape, strict=True):
                    self._time_baselines(state, report)
        return self._report(per_shape, states)

    def _quiet_note(self, taken: bool | None, consequence: str) -> None:
        if taken is False:
            self.notes.append(
                f"the timing lock ({self.settings.timing_lock_dir}) was not free within the evaluation's "
                f"deadline: {consequence}"
            )

    def _correctness_stage(self) -> list[ShapeState]:
        """Everything before the timing: the runner, every shape's input sets and its correctness
        trials, the stream probe, and the next candidate's runner started."""
        with self._phase("runner_start"):
            self._start_runner()
        shapes = list(self.task.shapes)
        seeds_per_shape = max(self.task.seeds, math.ceil(self.settings.correctness_trials / len(shapes)))
        states = self.states
        for index, shape in enumerate(shapes):
            with self._phase("inputs"):
                state = self._shape_state(index, shape, seeds_per_shape)
            states.append(state)
            with self._phase("trials"):
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
        if self.before_timing is not None:
            with self._phase("next_runner_start"):
                self.before_timing()
        return states

    def _roofline(self, per_shape: list[ShapeReport], states: list[ShapeState]) -> tuple[float | None, str]:
        """The floor of every shape (into its report) and their sum, with what bounds it; measured
        after the candidate's runner has gone, like the baselines."""
        traffic = [s.traffic for s in states]
        if any(t is None for t in traffic):
            return None, ""
        limits = roofline.device_limits(self.request.device, self.device.synchronize)
        for report, t in zip(per_shape, traffic, strict=True):
            assert t is not None
            report.floor_ms = t.floor_ms(limits)
        # the runtime is the sum of the shapes' times, so its floor is the sum of their floors (tighter
        # than the floor of the summed traffic where one shape is compute-bound and another memory-bound)
        total = roofline.Traffic(sum(t.bytes_moved for t in traffic if t), sum(t.flops for t in traffic if t))
        return sum(r.floor_ms or 0.0 for r in per_shape), total.bound(limits)

    def _report(self, per_shape: list[ShapeReport], states: list[ShapeState]) -> EvaluationReport:
        runtime = sum(s.runtime_ms or 0.0 for s in per_shape)
        floor_ms, bound = self._roofline(per_shape, states)
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
            baseline_age_s=max((s.baseline_age_s or 0.0 for s in per_shape), default=None)
            if has_baseline
            else None,
            compile_baseline_ms=compile_ms,
            speedup=(baseline / runtime) if has_baseline and baseline and runtime else None,
            speedup_vs_compile=(compile_ms / runtime) if compile_ms and runtime else None,
            per_shape=per_shape,
            screened=self.screened,
            floor_ms=floor_ms,
            roofline_fraction=(floor_ms / runtime) if floor_ms and runtime else None,
            bound=bound,
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
            "phases_ms": {name: round(seconds * 1e3, 3) for name, seconds in self.phases.items()},
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
        for address in self.pinned:
            self.device.unpin(address)
        for arena in self.arenas:
            arena.close()
        self.states.clear()  # the views of lent memory go before the memory does
        for lent in self.lent:
            lent.close()
        self.lent.clear()
        self.device.release_memory()


def kill_and_reap(pid: int) -> None:
    """End a process the candidate left behind (the judge is its subreaper) and collect its status."""
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, 0)


def run_evaluation(
    request: EvaluationRequest,
    runner_factory: Callable[[], RunnerProcess],
    before_timing: Callable[[], None] | None = None,
    trial_cache: TrialCache | None = None,
) -> tuple[EvaluationReport, bool]:
    """Judge one request; returns (report, whether this judge's own device context is broken)."""
    started = time.monotonic()
    evaluation: Evaluation | None = None
    try:
        evaluation = Evaluation(request, runner_factory, before_timing, trial_cache)
        report = evaluation.run()
    except EvaluationFailure as raised:
        failure = reasons.judge_failure(raised)
        report = (
            evaluation.failure_report(failure)
            if evaluation
            else EvaluationReport.failure(failure.reason, failure.message)
        )
    except Exception as exc:  # a bug or an unexpected device state in the judge: never let it escape
        failure = classify_exception(exc, "evaluation")
        if failure.reason == reasons.GLUE_ERROR:
            failure = EvaluationFailure(reasons.WORKER_ERROR, f"{type(exc).__name__}: {exc}")
            failure.__cause__ = exc
            failure = reasons.judge_failure(failure)
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
