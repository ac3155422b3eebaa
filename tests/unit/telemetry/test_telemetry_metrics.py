"""Behaviour of the metric definitions: names, labels, dedicated registries and the helpers."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kernelfoundry.telemetry.metrics import ALL_METRICS, Metrics, MetricSpec, subject_kind

# The brief every service and the dashboard are written against.
REQUIRED = {
    "kf_messages_processed_total": ("counter", {"service", "subject_kind", "outcome"}),
    "kf_message_duration_seconds": ("histogram", {"service", "subject_kind"}),
    "kf_queue_lag_messages": ("gauge", {"service", "consumer"}),
    "kf_dead_letters_total": ("counter", {"service", "reason"}),
    "kf_generations_total": ("counter", {"generator", "outcome"}),
    "kf_generation_tokens_total": ("counter", {"generator", "kind"}),
    "kf_generation_cost_usd_total": ("counter", {"generator"}),
    "kf_ensemble_member_weight": ("gauge", {"generator", "member"}),
    "kf_ensemble_member_outcomes_total": ("counter", {"generator", "member", "outcome"}),
    "kf_compiles_total": ("counter", {"hardware", "outcome"}),
    "kf_compile_duration_seconds": ("histogram", {"hardware"}),
    "kf_build_cache_hits_total": ("counter", {"hardware"}),
    "kf_evaluations_total": ("counter", {"hardware", "outcome"}),
    "kf_evaluation_failures_total": ("counter", {"hardware", "reason"}),
    "kf_evaluation_duration_seconds": ("histogram", {"hardware"}),
    "kf_executor_busy_seconds_total": ("counter", {"hardware", "device"}),
    "kf_kernel_speedup": ("gauge", {"task", "hardware"}),
    "kf_run_speedup": ("histogram", {"task", "hardware"}),
    "kf_run_median_seconds": ("gauge", {"task", "hardware", "kind"}),
    "kf_archive_best_speedup": ("gauge", {"task"}),
    "kf_runs_active": ("gauge", set()),
    "kf_runs_total": ("counter", {"status"}),
    "kf_archive_cells_filled": ("gauge", {"task"}),
    "kf_store_events_written_total": ("counter", {"kind"}),
    "kf_store_write_duration_seconds": ("histogram", set()),
}
ALLOWED_LABELS = {"service", "subject_kind", "outcome", "consumer", "reason", "generator", "kind"}
ALLOWED_LABELS |= {"hardware", "task", "status", "device"}  # device: one per executor's device
ALLOWED_LABELS |= {"member"}  # an ensemble's members: as many as KF_LLM_PROVIDERS lists


def test_every_required_metric_is_defined_with_its_kind_and_labels() -> None:
    defined = {spec.name: (spec.kind, set(spec.labels)) for spec in ALL_METRICS}
    assert defined == REQUIRED


def test_labels_are_low_cardinality_only() -> None:
    for spec in ALL_METRICS:
        assert set(spec.labels) <= ALLOWED_LABELS, spec.name
        assert not any("id" in label.split("_") for label in spec.labels), spec.name


def test_every_spec_is_registered_in_the_metrics_registry() -> None:
    metrics = Metrics(process_collectors=False)
    metrics.store_write_duration_seconds.observe(0.01)
    families = {family.name: family.type for family in metrics.registry.collect()}
    for spec in ALL_METRICS:
        # prometheus_client reports counters under the name without the _total suffix.
        family = spec.name.removesuffix("_total") if spec.kind == "counter" else spec.name
        assert families.get(family) == spec.kind, spec.name


def test_each_metrics_object_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()
    first.compiles_total.labels(hardware="cpu.x86_64", outcome="ok").inc()
    assert first.registry is not second.registry
    assert (
        first.registry.get_sample_value("kf_compiles_total", {"hardware": "cpu.x86_64", "outcome": "ok"})
        == 1.0
    )
    assert (
        second.registry.get_sample_value("kf_compiles_total", {"hardware": "cpu.x86_64", "outcome": "ok"})
        is None
    )


def test_a_given_registry_is_used_and_cannot_be_registered_twice() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    assert metrics.registry is registry
    with pytest.raises(ValueError, match="Duplicated"):
        Metrics(registry)


def test_a_fresh_registry_carries_process_metrics() -> None:
    exposition = generate_latest(Metrics().registry).decode()
    assert "python_info" in exposition
    assert "python_gc_objects_collected_total" in exposition


def test_histogram_specs_have_increasing_buckets_and_sample_names() -> None:
    for spec in ALL_METRICS:
        if spec.kind == "histogram":
            assert spec.buckets is not None
            assert list(spec.buckets) == sorted(set(spec.buckets)), spec.name
            assert spec.sample_names() == {f"{spec.name}_bucket", f"{spec.name}_sum", f"{spec.name}_count"}
        else:
            assert spec.sample_names() == {spec.name}


@pytest.mark.parametrize(
    ("subject", "kind"),
    [
        ("kf.compile.cuda.sm90", "compile"),
        ("kf.execute.cpu.x86_64", "execute"),
        ("kf.generate.heuristic", "generate"),
        ("kf.events.evaluation.finished", "events"),
        ("kf.deadletter.compile", "deadletter"),
        ("other.compile.x", "other"),
        ("kf", "other"),
        ("", "other"),
    ],
)
def test_subject_kind_keeps_only_the_second_token_of_kf_subjects(subject: str, kind: str) -> None:
    assert subject_kind(subject) == kind


def test_message_block_counts_and_times_with_the_outcome_set_inside() -> None:
    metrics = Metrics(process_collectors=False)
    with metrics.message("compiler", "kf.compile.cpu.x86_64"):
        pass
    with metrics.message("compiler", "kf.compile.cpu.x86_64") as observation:
        observation.outcome = "retry"
    get = metrics.registry.get_sample_value
    labels = {"service": "compiler", "subject_kind": "compile"}
    assert get("kf_messages_processed_total", {**labels, "outcome": "ok"}) == 1.0
    assert get("kf_messages_processed_total", {**labels, "outcome": "retry"}) == 1.0
    assert get("kf_message_duration_seconds_count", labels) == 2.0


def test_message_block_counts_an_escaping_exception_as_error_and_reraises() -> None:
    metrics = Metrics(process_collectors=False)
    with pytest.raises(RuntimeError, match="handler broke"), metrics.message("store", "kf.events.x"):
        raise RuntimeError("handler broke")
    assert (
        metrics.registry.get_sample_value(
            "kf_messages_processed_total", {"service": "store", "subject_kind": "events", "outcome": "error"}
        )
        == 1.0
    )


def test_record_speedup_keeps_the_best_so_far_per_task_and_hardware() -> None:
    metrics = Metrics(process_collectors=False)
    assert metrics.record_speedup("matmul", "cuda.h200", 1.5) == 1.5
    assert metrics.record_speedup("matmul", "cuda.h200", 1.2) == 1.5
    assert metrics.record_speedup("matmul", "cuda.h200", 3.0) == 3.0
    assert metrics.record_speedup("matmul", "cpu.x86_64", 0.8) == 0.8
    get = metrics.registry.get_sample_value
    assert get("kf_kernel_speedup", {"task": "matmul", "hardware": "cuda.h200"}) == 3.0
    assert get("kf_kernel_speedup", {"task": "matmul", "hardware": "cpu.x86_64"}) == 0.8


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_record_speedup_ignores_values_no_kernel_can_produce(bad: float) -> None:
    metrics = Metrics(process_collectors=False)
    metrics.record_speedup("softmax", "cpu.x86_64", 2.0)
    assert metrics.record_speedup("softmax", "cpu.x86_64", bad) == 2.0
    assert metrics.record_speedup("fresh", "cpu.x86_64", bad) == 0.0
    assert (
        metrics.registry.get_sample_value("kf_kernel_speedup", {"task": "fresh", "hardware": "cpu.x86_64"})
        is None
    )


def test_each_finished_run_s_figure_is_observed_in_the_speedup_distribution() -> None:
    metrics = Metrics(process_collectors=False)
    for figure in (1.1, 1.8, 0.9, math.nan):
        metrics.record_speedup("matmul", "cuda.h200", figure)
    get = metrics.registry.get_sample_value
    labels = {"task": "matmul", "hardware": "cuda.h200"}
    assert get("kf_run_speedup_count", labels) == 3  # NaN is no figure
    assert get("kf_run_speedup_sum", labels) == pytest.approx(1.1 + 1.8 + 0.9)
    assert get("kf_run_speedup_bucket", {**labels, "le": "1.0"}) == 1
    assert get("kf_run_speedup_bucket", {**labels, "le": "2.0"}) == 3


def test_a_restored_best_raises_the_gauge_without_counting_a_run() -> None:
    metrics = Metrics(process_collectors=False)
    assert metrics.restore_best_speedup("matmul", "cuda.h200", 2.5) == 2.5
    assert metrics.restore_best_speedup("matmul", "cuda.h200", 1.5) == 2.5
    assert metrics.record_speedup("matmul", "cuda.h200", 2.0) == 2.5
    get = metrics.registry.get_sample_value
    assert get("kf_kernel_speedup", {"task": "matmul", "hardware": "cuda.h200"}) == 2.5
    assert get("kf_run_speedup_count", {"task": "matmul", "hardware": "cuda.h200"}) == 1


def test_a_run_figure_sets_the_kernel_eager_and_torch_compile_medians_in_seconds() -> None:
    metrics = Metrics(process_collectors=False)
    best = metrics.record_run_figure(
        "softmax", "cpu.x86_64", speedup=4.0, kernel_ms=2.5, eager_ms=10.0, compile_ms=5.0
    )
    assert best == 4.0
    get = metrics.registry.get_sample_value
    at = {"task": "softmax", "hardware": "cpu.x86_64"}
    assert get("kf_run_median_seconds", {**at, "kind": "kernel"}) == pytest.approx(0.0025)
    assert get("kf_run_median_seconds", {**at, "kind": "eager"}) == pytest.approx(0.010)
    assert get("kf_run_median_seconds", {**at, "kind": "torch_compile"}) == pytest.approx(0.005)
    assert get("kf_run_speedup_count", at) == 1 and get("kf_kernel_speedup", at) == 4.0
    # A later run without torch.compile leaves the previous torch.compile median, updates the others.
    metrics.record_run_figure("softmax", "cpu.x86_64", speedup=2.0, kernel_ms=4.0, eager_ms=8.0)
    assert get("kf_run_median_seconds", {**at, "kind": "kernel"}) == pytest.approx(0.004)
    assert get("kf_run_median_seconds", {**at, "kind": "torch_compile"}) == pytest.approx(0.005)
    assert get("kf_kernel_speedup", at) == 4.0


def test_the_archive_gauges_follow_the_latest_update_and_skip_a_missing_best() -> None:
    metrics = Metrics(process_collectors=False)
    metrics.record_archive_cells("relu", 3, best_speedup=1.7)
    metrics.record_archive_cells("relu", 4, best_speedup=1.4)  # a new run's archive starts lower
    metrics.record_archive_cells("relu", 5)
    metrics.record_archive_cells("relu", 5, best_speedup=math.inf)
    get = metrics.registry.get_sample_value
    assert get("kf_archive_cells_filled", {"task": "relu"}) == 5
    assert get("kf_archive_best_speedup", {"task": "relu"}) == 1.4


def test_metric_spec_is_immutable() -> None:
    spec = MetricSpec("kf_x_total", "counter", "x")
    with pytest.raises(AttributeError):
        spec.name = "kf_y_total"  # type: ignore[misc]
