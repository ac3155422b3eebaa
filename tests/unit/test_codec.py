"""The one codec between wire messages and the domain: run settings and evaluation results decode the
same way from a live event and from the lineage's record, and the run settings survive a round trip."""

from __future__ import annotations

import json

from kernelfoundry.codec import (
    evaluation_from_proto,
    evaluation_from_record,
    run_config_from_proto,
    run_config_to_proto,
    shape_timings_from_details,
)
from kernelfoundry.domain.results import EvaluationResult, RunConfig, ShapeTiming, build_failure
from kernelfoundry.v1 import evaluation_pb2, lineage_pb2, run_pb2


def test_run_settings_round_trip_and_name_their_backend() -> None:
    proto = run_pb2.RunConfig(
        hardware="cuda.h200",
        generator="heuristic",
        iterations=7,
        population=3,
        sweeps=True,
        seed=9,
        islands=2,
    )
    settings = run_config_from_proto(proto)
    assert settings == RunConfig("cuda.h200", "heuristic", 7, 3, 2, True, 9)
    assert settings.backend == "cuda"
    assert run_config_to_proto(settings) == proto


def test_an_event_and_its_stored_record_decode_to_the_same_result() -> None:
    event = evaluation_pb2.EvaluationFinished(
        candidate_id="c1",
        run_id="run-1",
        correct=True,
        runtime_ms=0.5,
        baseline_ms=1.5,
        compile_baseline_ms=1.2,
        speedup=3.0,
        shapes=[evaluation_pb2.ShapeTiming(shape="small", runtime_ms=0.25, baseline_ms=0.75)],
    )
    details = {"per_shape": [{"shape": "small", "runtime_ms": 0.25, "baseline_ms": 0.75}, {"no": "shape"}]}
    record = lineage_pb2.EvaluationRecord(
        candidate_id="c1",
        run_id="run-1",
        correct=True,
        runtime_ms=0.5,
        baseline_ms=1.5,
        compile_baseline_ms=1.2,
        speedup=3.0,
        details_json=json.dumps(details),
    )
    assert evaluation_from_proto(event) == evaluation_from_record(record)
    assert evaluation_from_proto(event).shapes == (ShapeTiming("small", 0.25, 0.75, 0.0),)


def test_a_stored_report_that_is_not_json_has_no_shape_timings() -> None:
    assert shape_timings_from_details("{not json") == ()
    assert shape_timings_from_details(json.dumps(["a list"])) == ()
    assert shape_timings_from_details("") == ()


def test_a_result_gives_the_engine_no_speedup_for_a_failure_and_keeps_the_mismatch() -> None:
    failed = EvaluationResult("c2", correct=False, reason="wrong_result", speedup=2.0, max_abs_error=0.5)
    info = failed.info()
    assert info.failed and info.fitness == 0.0 and info.speedup is None
    assert info.mismatch is not None and info.mismatch.abs_error == 0.5
    ok = EvaluationResult("c3", correct=True, runtime_ms=2.0, baseline_ms=4.0, speedup=2.0)
    assert ok.info().runtime_s == 0.002 and ok.info().fitness == 2.0
    measurement = ok.measurement()
    assert measurement.runtime_ms == 2.0 and measurement.runtime_spread_ms is None  # 0: not measured


def test_a_failed_build_is_a_failure_with_the_log_tail() -> None:
    failure = build_failure("c4", "", "x" * 5000 + "error: no such symbol")
    assert failure.reason == "compile_error" and failure.message.endswith("error: no such symbol")
    assert len(failure.message) == 4000
    assert build_failure("c5", "toolchain_missing", "").reason == "toolchain_missing"
