"""The evolver's run metrics, kept true across cancel, resume and restart (docs/operations.md lists them).

- kf_runs_active reads the coordinator's count of runs in progress (`set_function`, wired in main.py): a
  run leaves the count the moment it ends (completed, failed, cancelled) and its state is dropped, a
  resumed run enters it when it is restored. Never incremented or decremented, so it can neither drift
  nor go negative.
- kf_runs_total, kf_run_speedup, kf_run_median_seconds and kf_kernel_speedup: once per ending
  (`record_run_finished`, the coordinator's `on_finished`), whoever ended the run.
- kf_evaluation_duration_seconds: once per evaluation result the evolver takes
  (`record_evaluation_duration`; a redelivered result is not observed twice).
- kf_kernel_speedup after a restart: rebuilt from the ended runs' summaries in the lineage store
  (`restore_best_speedups`), without counting them as new runs.
"""

from __future__ import annotations

from collections.abc import Iterable

from kernelfoundry.client import LineageClient
from kernelfoundry.services.evolver.stored import progress_of_record
from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import evaluation_pb2, lineage_pb2, run_pb2

log = get_logger(__name__)

ENDED = ("finished", "cancelled", "failed")  # run record statuses whose summary is a run's final progress


def record_run_finished(metrics: Metrics, finished: run_pb2.RunFinished) -> None:
    """A run's ending: its one speedup figure with the medians it came from (kernelfoundry.domain.speedup)
    and the count of endings by status. kf_runs_active is not touched: it reads the coordinator's count."""
    progress = finished.progress
    if progress.HasField("speedup"):
        figure = progress.speedup
        metrics.record_run_figure(
            progress.task_name,
            progress.config.hardware,
            speedup=figure.speedup,
            kernel_ms=figure.kernel_ms,
            eager_ms=figure.eager_ms,
            compile_ms=figure.compile_ms,
        )
    status = run_pb2.RunStatus.Name(finished.status).removeprefix("RUN_STATUS_").lower()
    metrics.runs_total.labels(status=status).inc()


def record_evaluation_duration(metrics: Metrics, event: evaluation_pb2.EvaluationFinished) -> None:
    """One evaluation's wall time (every shape and seed, checks, timing, baselines), by hardware."""
    if event.duration_s > 0:
        metrics.evaluation_duration_seconds.labels(hardware=event.hardware).observe(event.duration_s)


def best_speedups_of(records: Iterable[lineage_pb2.RunRecord]) -> dict[tuple[str, str], float]:
    """The best figure per (task, hardware) among the ended runs' summaries (the figure each ending
    recorded)."""
    best: dict[tuple[str, str], float] = {}
    for record in records:
        if record.status not in ENDED:
            continue
        progress = progress_of_record(record)
        if not progress.HasField("speedup") or progress.speedup.speedup <= 0:
            continue
        key = (progress.task_name, progress.config.hardware or record.hardware)
        best[key] = max(best.get(key, 0.0), progress.speedup.speedup)
    return best


def restore_best_figures(metrics: Metrics, records: Iterable[lineage_pb2.RunRecord]) -> int:
    """Raise kf_kernel_speedup to the stored runs' best figures; returns how many (task, hardware) pairs."""
    best = best_speedups_of(records)
    for (task, hardware), speedup in sorted(best.items()):
        metrics.restore_best_speedup(task, hardware, speedup)
    return len(best)


async def restore_best_speedups(metrics: Metrics, store_address: str, wait_s: float) -> int:
    """After a restart: rebuild kf_kernel_speedup from the lineage store's ended runs. Best effort: an
    unreachable store is logged, and the gauge fills again as runs end."""
    client = LineageClient(store_address)
    try:
        if not await client.ready(wait_s):
            log.warning("no lineage API answers; the best-speedup gauge starts empty", address=store_address)
            return 0
        records = await client.list_runs()
        restored = restore_best_figures(metrics, records)
        log.info("best speedups restored from the lineage", pairs=restored)
        return restored
    except Exception as exc:  # the gauge is a convenience: never stop the evolver for it
        log.warning("best speedups could not be restored", error=type(exc).__name__)
        return 0
    finally:
        await client.close()
