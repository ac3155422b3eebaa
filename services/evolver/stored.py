"""Runs the evolver no longer holds in memory, answered from the lineage the store keeps.

A run's working state leaves the evolver when it ends, and its final progress after the newest
`retain_finished` endings (kernelfoundry.services.evolver.runs); runs of an earlier evolver process, and
stopped runs brought in by ImportRun, were never in this one. GetRun, StreamRunProgress, CancelRun and
GetBestKernel answer those from the store's run record (its status and the summary written when the run
ended) and, for the best kernel's source, its history. Pure conversions: the caller does the reading.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from google.protobuf.json_format import ParseDict, ParseError

from kernelfoundry.services.evolver.files import best_file_name, best_folder
from kernelfoundry.v1 import lineage_pb2, run_pb2

STATUS_OF_RECORD = {
    "running": run_pb2.RUN_STATUS_RUNNING,
    "finished": run_pb2.RUN_STATUS_COMPLETED,
    "cancelled": run_pb2.RUN_STATUS_CANCELLED,
    "failed": run_pb2.RUN_STATUS_FAILED,
    "stopped": run_pb2.RUN_STATUS_STOPPED,
}
STOPPED_MESSAGE = "stopped: imported unfinished; ResumeRun (`kernelfoundry resume RUN`) continues it"


def _object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def progress_of_record(record: lineage_pb2.RunRecord) -> run_pb2.RunProgress:
    """A stored run's progress: its summary (the final progress less the best kernel's source), its
    status, and its configuration when the summary has none (a run that never ended here)."""
    summary = _object(record.summary_json)
    best_id = str(summary.pop("best_candidate_id", "") or "")
    best_speedup = summary.get("best_speedup", 0.0)  # the progress field, which the store sets to the best's
    progress = run_pb2.RunProgress()
    try:
        ParseDict(summary, progress, ignore_unknown_fields=True)
    except (ParseError, ValueError, TypeError):
        progress = run_pb2.RunProgress()  # a summary of another shape: the record's own fields still say much
    progress.run_id = record.run_id
    progress.task_name = record.task_name
    progress.status = STATUS_OF_RECORD.get(record.status, run_pb2.RUN_STATUS_UNSPECIFIED)
    if not progress.HasField("config"):
        config = _object(record.config_json)
        config.pop("task", None)
        try:
            ParseDict(config, progress.config, ignore_unknown_fields=True)
        except (ParseError, ValueError, TypeError):
            progress.ClearField("config")
    if progress.status == run_pb2.RUN_STATUS_STOPPED and not progress.message:
        progress.message = STOPPED_MESSAGE
    if best_id:
        progress.best.candidate_id = best_id
        progress.best.speedup = float(best_speedup) if isinstance(best_speedup, int | float) else 0.0
        progress.best.hardware = progress.config.hardware or record.hardware
    return progress


def best_of_history(
    progress: run_pb2.RunProgress, history: lineage_pb2.GetRunHistoryResponse, state_dir: Path
) -> run_pb2.BestKernel:
    """The best kernel of a stored run: the candidate its summary names, with the run's figure."""
    best = run_pb2.BestKernel()
    best.CopyFrom(progress.best)
    if not best.candidate_id:
        return best
    candidate = next((c for c in history.candidates if c.candidate_id == best.candidate_id), None)
    if candidate is not None:
        best.source.CopyFrom(candidate.source)
        best.descriptors.CopyFrom(candidate.analysed)
        best.iteration = candidate.iteration
        saved = best_folder(state_dir, progress.run_id) / best_file_name(candidate.source.language)
        if saved.is_file():
            best.path = str(saved.resolve())
    if progress.HasField("speedup"):
        best.runtime_ms = progress.speedup.kernel_ms
        best.baseline_ms = progress.speedup.eager_ms
        best.compile_baseline_ms = progress.speedup.compile_ms
    return best
