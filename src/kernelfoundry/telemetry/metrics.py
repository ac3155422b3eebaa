"""Prometheus metrics every KernelFoundry service exposes, defined once.

Each metric is declared as a `MetricSpec` (name, kind, help, labels) so the dashboard, the docs and the
tests can check themselves against this one list; `Metrics` builds them into a dedicated
`CollectorRegistry` per process (never the global default registry), so tests create fresh ones freely.

Labels are low-cardinality only: service, subject_kind, consumer, hardware, device (one per executor's
device), outcome, reason, generator, member (an ensemble's configured members), kind, status and task.
Task names are client text, so the task label is bounded here (`TaskLabels`): the first
`max_task_labels` distinct names a process sees get a series of their own, every later one is counted
under `OTHER_TASKS`. This module must never label by candidate id,
run id, source hash or anything else that grows without bound, and it imports no transport.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from threading import Lock
from time import perf_counter
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

MetricKind = Literal["counter", "gauge", "histogram"]

# Message handling spans milliseconds (store writes) to minutes (evaluations under a heartbeat).
MESSAGE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# nvcc on a templated kernel takes seconds to a minute; g++ -O3 -fopenmp well under that.
COMPILE_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
# An evaluation runs every shape and seed plus baselines, and is bounded by its deadline.
EVALUATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# Distinct task label values one process exposes before the rest share OTHER_TASKS.
MAX_TASK_LABELS = 100
# Not a task name: names are [A-Za-z0-9_.+-] (protos/kernelfoundry/v1/task.proto), so no task can take it.
OTHER_TASKS = "(other)"
# A finished run's speedup over eager: slower than eager (a failed search) to far beyond it.
SPEEDUP_BUCKETS = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0, 64.0)
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass(frozen=True)
class MetricSpec:
    """One metric as Prometheus exposes it.

    `name` is the family name a query uses: counters end in `_total`, and a histogram `name` is queried as
    `name_bucket`, `name_sum` and `name_count`.
    """

    name: str
    kind: MetricKind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None

    def sample_names(self) -> frozenset[str]:
        """The series names a PromQL query may use for this metric."""
        if self.kind == "histogram":
            return frozenset({f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count"})
        return frozenset({self.name})


MESSAGES_PROCESSED = MetricSpec(
    "kf_messages_processed_total",
    "counter",
    "Bus messages handled, by the service that handled them, the subject kind "
    "(generate, compile, execute, events) and the outcome (ok, retry, error, dead_letter).",
    ("service", "subject_kind", "outcome"),
)
MESSAGE_DURATION = MetricSpec(
    "kf_message_duration_seconds",
    "histogram",
    "Wall time from fetching a bus message to acknowledging it.",
    ("service", "subject_kind"),
    MESSAGE_BUCKETS,
)
QUEUE_LAG = MetricSpec(
    "kf_queue_lag_messages",
    "gauge",
    "Messages waiting for a JetStream consumer (its num_pending); the workers autoscale on it.",
    ("service", "consumer"),
)
DEAD_LETTERS = MetricSpec(
    "kf_dead_letters_total",
    "counter",
    "Messages moved to a kf.deadletter subject after exhausting their deliveries, by reason code.",
    ("service", "reason"),
)
GENERATIONS = MetricSpec(
    "kf_generations_total",
    "counter",
    "Candidate generation requests answered, by generator and outcome (ok, empty, error).",
    ("generator", "outcome"),
)
GENERATION_TOKENS = MetricSpec(
    "kf_generation_tokens_total",
    "counter",
    "Tokens used by generators, by kind (prompt, completion).",
    ("generator", "kind"),
)
GENERATION_COST = MetricSpec(
    "kf_generation_cost_usd_total",
    "counter",
    "Estimated generator spend in US dollars from the provider's token prices.",
    ("generator",),
)
ENSEMBLE_WEIGHT = MetricSpec(
    "kf_ensemble_member_weight",
    "gauge",
    "Each ensemble member's current draw weight, per generator (the ensemble's name): its configured weight "
    "times its record (correct and improvement rates relative to the other members'); 0 while it is taken "
    "out after repeated provider failures.",
    ("generator", "member"),
)
ENSEMBLE_OUTCOMES = MetricSpec(
    "kf_ensemble_member_outcomes_total",
    "counter",
    "What became of each ensemble member's work: its evaluated candidates' archive outcomes (improvement, "
    "new_cell, elite_replaced, neutral, regression, failed), its answers without a usable kernel "
    "(no_kernel) and its provider's failures (provider_failure: the request went to the next member).",
    ("generator", "member", "outcome"),
)
COMPILES = MetricSpec(
    "kf_compiles_total",
    "counter",
    "Candidate builds, by hardware target and outcome (ok, compile_error, timeout, ...).",
    ("hardware", "outcome"),
)
COMPILE_DURATION = MetricSpec(
    "kf_compile_duration_seconds",
    "histogram",
    "Wall time of one build request; build-cache hits are included and take milliseconds.",
    ("hardware",),
    COMPILE_BUCKETS,
)
BUILD_CACHE_HITS = MetricSpec(
    "kf_build_cache_hits_total",
    "counter",
    "Builds served from the build cache (keyed by source hash and flags).",
    ("hardware",),
)
EVALUATIONS = MetricSpec(
    "kf_evaluations_total",
    "counter",
    "Candidate evaluations finished, by hardware and outcome (correct, failed).",
    ("hardware", "outcome"),
)
EVALUATION_FAILURES = MetricSpec(
    "kf_evaluation_failures_total",
    "counter",
    "Evaluations that did not produce a correct result, by reason code "
    "(output_not_written, mismatch, timeout, illegal_address, ...).",
    ("hardware", "reason"),
)
EVALUATION_DURATION = MetricSpec(
    "kf_evaluation_duration_seconds",
    "histogram",
    "Wall time of one evaluation: every shape and seed, correctness, timing and baselines.",
    ("hardware",),
    EVALUATION_BUCKETS,
)
EXECUTOR_BUSY = MetricSpec(
    "kf_executor_busy_seconds_total",
    "counter",
    "Seconds an executor spent evaluating, by hardware and the device it owns (cpu, cuda:<index>); its "
    "rate is the share of time the device had an evaluation.",
    ("hardware", "device"),
)
KERNEL_SPEEDUP = MetricSpec(
    "kf_kernel_speedup",
    "gauge",
    "Best run speedup over PyTorch eager so far, per task and hardware: each finished run's one figure "
    "(pooled eager median over the re-timed best kernel, kernelfoundry.domain.speedup). Tasks beyond the "
    f"first {MAX_TASK_LABELS} a service saw share the task label {OTHER_TASKS!r}.",
    ("task", "hardware"),
)
RUN_SPEEDUP = MetricSpec(
    "kf_run_speedup",
    "histogram",
    "Each finished run's one speedup figure over PyTorch eager, per task and hardware: the distribution of "
    f"what runs achieve (kf_kernel_speedup keeps only the best). Tasks beyond the first {MAX_TASK_LABELS} a "
    f"service saw share the task label {OTHER_TASKS!r}.",
    ("task", "hardware"),
    SPEEDUP_BUCKETS,
)
RUN_MEDIAN = MetricSpec(
    "kf_run_median_seconds",
    "gauge",
    "The last finished run's medians per task and hardware, by kind: kernel (its best kernel, re-timed), "
    "eager (the run's pooled PyTorch eager median) and torch_compile (torch.compile beside the best kernel, "
    f"when the executor measures it). Tasks beyond the first {MAX_TASK_LABELS} a service saw share the task "
    f"label {OTHER_TASKS!r}.",
    ("task", "hardware", "kind"),
)
ARCHIVE_BEST_SPEEDUP = MetricSpec(
    "kf_archive_best_speedup",
    "gauge",
    "The best elite's speedup over eager in the latest archive update, per task: a run's progress while it "
    f"runs (kf_kernel_speedup moves only when a run ends). Tasks beyond the first {MAX_TASK_LABELS} a "
    f"service saw share the task label {OTHER_TASKS!r}.",
    ("task",),
)
RUNS_ACTIVE = MetricSpec("kf_runs_active", "gauge", "Evolution runs in progress.")
RUNS = MetricSpec(
    "kf_runs_total",
    "counter",
    "Evolution runs that ended, by final status (completed, cancelled, failed).",
    ("status",),
)
ARCHIVE_CELLS_FILLED = MetricSpec(
    "kf_archive_cells_filled",
    "gauge",
    "MAP-Elites archive cells holding an elite, per task (64 cells: 3 axes of 4 levels); tasks beyond the "
    f"first {MAX_TASK_LABELS} a service saw share the task label {OTHER_TASKS!r}.",
    ("task",),
)
STORE_EVENTS_WRITTEN = MetricSpec(
    "kf_store_events_written_total",
    "counter",
    "Lineage events written by the store, by event kind.",
    ("kind",),
)
STORE_WRITE_DURATION = MetricSpec(
    "kf_store_write_duration_seconds",
    "histogram",
    "Wall time of one lineage write (MongoDB or SQLite).",
    (),
    STORE_BUCKETS,
)

ALL_METRICS: tuple[MetricSpec, ...] = (
    MESSAGES_PROCESSED,
    MESSAGE_DURATION,
    QUEUE_LAG,
    DEAD_LETTERS,
    GENERATIONS,
    GENERATION_TOKENS,
    GENERATION_COST,
    ENSEMBLE_WEIGHT,
    ENSEMBLE_OUTCOMES,
    COMPILES,
    COMPILE_DURATION,
    BUILD_CACHE_HITS,
    EVALUATIONS,
    EVALUATION_FAILURES,
    EVALUATION_DURATION,
    EXECUTOR_BUSY,
    KERNEL_SPEEDUP,
    RUN_SPEEDUP,
    RUN_MEDIAN,
    ARCHIVE_BEST_SPEEDUP,
    RUNS_ACTIVE,
    RUNS,
    ARCHIVE_CELLS_FILLED,
    STORE_EVENTS_WRITTEN,
    STORE_WRITE_DURATION,
)


def subject_kind(subject: str) -> str:
    """The low-cardinality kind of a bus subject: `kf.compile.cuda.sm90` gives `compile`.

    Subjects outside the `kf.` namespace give `other`, so a stray subject cannot add label values.
    """
    parts = subject.split(".")
    if len(parts) < 2 or parts[0] != "kf" or not parts[1]:
        return "other"
    return parts[1]


class TaskLabels:
    """The task label of a task name, bounded: the first `limit` distinct names keep their own value, any
    later one is `OTHER_TASKS`, so no client can add series without end by naming tasks."""

    def __init__(self, limit: int = MAX_TASK_LABELS) -> None:
        self.limit = max(0, limit)
        self._known: set[str] = set()
        self._lock = Lock()

    def __call__(self, task: str) -> str:
        with self._lock:
            if task in self._known:
                return task
            if len(self._known) < self.limit:
                self._known.add(task)
                return task
            return OTHER_TASKS

    def __len__(self) -> int:
        return len(self._known)


class MessageObservation:
    """Outcome holder for one message; the handler sets `outcome` before the block ends."""

    __slots__ = ("outcome",)

    def __init__(self, outcome: str) -> None:
        self.outcome = outcome


class Metrics:
    """Every KernelFoundry metric, registered in one registry.

    `Metrics()` makes a fresh registry (with process, platform and GC collectors); pass a registry to share
    one. Registering the same registry twice raises ValueError from prometheus_client (duplicate series).
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        process_collectors: bool = True,
        max_task_labels: int = MAX_TASK_LABELS,
    ) -> None:
        if registry is None:
            registry = CollectorRegistry(auto_describe=True)
            if process_collectors:
                ProcessCollector(registry=registry)
                PlatformCollector(registry=registry)
                GCCollector(registry=registry)
        self.registry = registry
        self.task_label = TaskLabels(max_task_labels)
        self._best_speedup: dict[tuple[str, str], float] = {}
        self._best_lock = Lock()

        self.messages_processed_total = self._counter(MESSAGES_PROCESSED)
        self.message_duration_seconds = self._histogram(MESSAGE_DURATION)
        self.queue_lag_messages = self._gauge(QUEUE_LAG)
        self.dead_letters_total = self._counter(DEAD_LETTERS)
        self.generations_total = self._counter(GENERATIONS)
        self.generation_tokens_total = self._counter(GENERATION_TOKENS)
        self.generation_cost_usd_total = self._counter(GENERATION_COST)
        self.ensemble_member_weight = self._gauge(ENSEMBLE_WEIGHT)
        self.ensemble_member_outcomes_total = self._counter(ENSEMBLE_OUTCOMES)
        self.compiles_total = self._counter(COMPILES)
        self.compile_duration_seconds = self._histogram(COMPILE_DURATION)
        self.build_cache_hits_total = self._counter(BUILD_CACHE_HITS)
        self.evaluations_total = self._counter(EVALUATIONS)
        self.evaluation_failures_total = self._counter(EVALUATION_FAILURES)
        self.evaluation_duration_seconds = self._histogram(EVALUATION_DURATION)
        self.executor_busy_seconds_total = self._counter(EXECUTOR_BUSY)
        self.kernel_speedup = self._gauge(KERNEL_SPEEDUP)
        self.run_speedup = self._histogram(RUN_SPEEDUP)
        self.run_median_seconds = self._gauge(RUN_MEDIAN)
        self.archive_best_speedup = self._gauge(ARCHIVE_BEST_SPEEDUP)
        self.runs_active = self._gauge(RUNS_ACTIVE)
        self.runs_total = self._counter(RUNS)
        self.archive_cells_filled = self._gauge(ARCHIVE_CELLS_FILLED)
        self.store_events_written_total = self._counter(STORE_EVENTS_WRITTEN)
        self.store_write_duration_seconds = self._histogram(STORE_WRITE_DURATION)

    def _counter(self, spec: MetricSpec) -> Counter:
        return Counter(spec.name, spec.help, spec.labels, registry=self.registry)

    def _gauge(self, spec: MetricSpec) -> Gauge:
        return Gauge(spec.name, spec.help, spec.labels, registry=self.registry)

    def _histogram(self, spec: MetricSpec) -> Histogram:
        assert spec.buckets is not None, f"histogram {spec.name} needs buckets"
        return Histogram(spec.name, spec.help, spec.labels, buckets=spec.buckets, registry=self.registry)

    @contextmanager
    def message(self, service: str, subject: str, outcome: str = "ok") -> Iterator[MessageObservation]:
        """Count and time the handling of one bus message.

        The block's observation starts with `outcome`; set it to `retry` or `dead_letter` as the handler
        decides. An exception escaping the block is counted as outcome `error` and re-raised.
        """
        kind = subject_kind(subject)
        observation = MessageObservation(outcome)
        start = perf_counter()
        try:
            yield observation
        except BaseException:
            observation.outcome = "error"
            raise
        finally:
            self.message_duration_seconds.labels(service=service, subject_kind=kind).observe(
                perf_counter() - start
            )
            self.messages_processed_total.labels(
                service=service, subject_kind=kind, outcome=observation.outcome
            ).inc()

    def record_archive_cells(self, task: str, cells: int, best_speedup: float | None = None) -> None:
        """Set the archive gauges of the task's (bounded) label: cells filled and, when given, the best
        elite's speedup (ignored unless finite and positive)."""
        label = self.task_label(task)
        self.archive_cells_filled.labels(task=label).set(cells)
        if best_speedup is not None and _measured(best_speedup):
            self.archive_best_speedup.labels(task=label).set(best_speedup)

    def record_speedup(self, task: str, hardware: str, speedup: float) -> float:
        """One finished run's reported figure (RunProgress.speedup): observed in the run-speedup
        distribution, and the best-so-far gauge for (task, hardware) raised if it beats it (tasks beyond
        the label bound share OTHER_TASKS: its value is the best of all of them).

        Call it once per finished run, never with one evaluation's ratio (a single noisy eager timing must
        not set the gauge) nor to rebuild the gauge after a restart (`restore_best_speedup`: a restored
        figure is not a new run).

        Returns the best speedup after the update. Non-finite or non-positive values are ignored: they
        come from failed timings, never from a faster kernel.
        """
        if _measured(speedup):
            self.run_speedup.labels(task=self.task_label(task), hardware=hardware).observe(speedup)
        return self.restore_best_speedup(task, hardware, speedup)

    def restore_best_speedup(self, task: str, hardware: str, speedup: float) -> float:
        """Raise the best-so-far gauge only (a figure read back from the lineage store after a restart);
        returns the best after the update, 0.0 if there is none."""
        task = self.task_label(task)
        key = (task, hardware)
        with self._best_lock:
            best = self._best_speedup.get(key)
            if _measured(speedup) and (best is None or speedup > best):
                best = speedup
                self._best_speedup[key] = best
                self.kernel_speedup.labels(task=task, hardware=hardware).set(best)
            return best if best is not None else 0.0

    def record_run_figure(
        self,
        task: str,
        hardware: str,
        *,
        speedup: float,
        kernel_ms: float,
        eager_ms: float,
        compile_ms: float = 0.0,
    ) -> float:
        """A finished run's figure with the medians it came from (RunProgress.speedup: kernel_ms, eager_ms,
        compile_ms; 0 where not measured): `record_speedup`, and the medians of kf_run_median_seconds
        (a kind not measured is left as the previous run set it). Returns the best speedup after it."""
        label = self.task_label(task)
        for kind, ms in (("kernel", kernel_ms), ("eager", eager_ms), ("torch_compile", compile_ms)):
            if _measured(ms):
                self.run_median_seconds.labels(task=label, hardware=hardware, kind=kind).set(ms / 1000.0)
        return self.record_speedup(task, hardware, speedup)


def _measured(value: float) -> bool:
    """A value a timing can produce: finite and positive (NaN, inf, 0 and below come from failures)."""
    return math.isfinite(value) and value > 0
