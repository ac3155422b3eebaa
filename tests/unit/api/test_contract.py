"""The declared request contract (buf.validate rules in protos/) as protovalidate enforces it."""

from __future__ import annotations

import pytest

from kernelfoundry.api import contract
from kernelfoundry.api.errors import ApiError
from kernelfoundry.v1 import kernel_pb2, lineage_pb2, run_pb2, service_pb2, task_pb2

INT32_MAX = 2**31 - 1


def good_submission() -> service_pb2.SubmitRunRequest:
    return service_pb2.SubmitRunRequest(
        task=task_pb2.Task(name="chain", reference_source="import torch\n"),
        config=run_pb2.RunConfig(hardware="cpu.x86_64", generator="heuristic", iterations=2, population=2),
    )


def test_a_good_submission_keeps_every_rule() -> None:
    assert contract.violations(good_submission()) == []


@pytest.mark.parametrize(
    ("field", "value", "rule"),
    [
        ("islands", INT32_MAX, "int32.gte_lte"),
        ("population", INT32_MAX, "int32.gte_lte"),
        ("iterations", INT32_MAX, "int32.gte_lte"),
        ("iterations", -1, "int32.gte_lte"),
        ("population", -5, "int32.gte_lte"),
        ("islands", -2, "int32.gte_lte"),
        ("generator", "../../x", "string.pattern"),
        ("generator", "nope.nope", "string.pattern"),
        ("generator", "a\x00b", "string.pattern"),
        ("hardware", "cuda.h200 *", "string.pattern"),
        ("hardware", "cpu", "string.pattern"),
    ],
)
def test_a_run_config_field_out_of_its_rule_is_named_with_the_rule(
    field: str, value: object, rule: str
) -> None:
    request = good_submission()
    setattr(request.config, field, value)
    broken = contract.violations(request)
    assert len(broken) == 1
    assert broken[0].startswith(f"config.{field}: ")
    assert broken[0].endswith(f"({rule})")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_tolerances_and_budgets_must_be_finite_and_not_negative(value: float) -> None:
    request = good_submission()
    request.task.tolerance.atol = value
    request.task.budget.wall_time_s = value
    broken = contract.violations(request)
    assert any(v.startswith("task.tolerance.atol: ") for v in broken)
    assert any(v.startswith("task.budget.wall_time_s: ") for v in broken)


def test_a_submission_without_a_task_is_refused() -> None:
    assert contract.violations(service_pb2.SubmitRunRequest()) == ["task: value is required (required)"]


def test_nul_bytes_in_source_and_map_keys_are_refused_and_keys_are_quoted_short() -> None:
    request = good_submission()
    request.task.reference_source = "import torch\x00"
    request.task.initial_kernels.append(kernel_pb2.KernelSource(params={"x" * 100 + "\x00": "1"}))
    broken = contract.violations(request)
    assert any(v.startswith("task.reference_source: ") for v in broken)
    key_violation = next(v for v in broken if v.startswith("task.initial_kernels[0].params["))
    assert "x" * 41 not in key_violation


@pytest.mark.parametrize(
    "run_id", ["/etc/passwd", "../run-1", "run-1\x00", "run-" + "a" * 100_000, "", "RUN-ABC", "run-a.b"]
)
def test_run_ids_that_could_name_a_path_or_subject_are_refused_everywhere(run_id: str) -> None:
    requests = [
        service_pb2.GetRunRequest(run_id=run_id),
        service_pb2.CancelRunRequest(run_id=run_id),
        service_pb2.StreamRunProgressRequest(run_id=run_id),
        service_pb2.GetBestKernelRequest(run_id=run_id),
        lineage_pb2.ExportRunRequest(run_id=run_id),
        lineage_pb2.GetRunHistoryRequest(run_id=run_id),
        lineage_pb2.GetRunRecordRequest(run_id=run_id),
        lineage_pb2.GetArchiveSnapshotsRequest(run_id=run_id),
    ]
    for request in requests:
        assert contract.violations(request), type(request).__name__


def test_server_made_run_ids_keep_the_contract() -> None:
    from kernelfoundry.ids import is_run_id, new_run_id

    run_id = new_run_id()
    assert is_run_id(run_id)
    assert contract.violations(lineage_pb2.ExportRunRequest(run_id=run_id)) == []


def test_check_raises_invalid_argument_naming_every_field_and_caps_the_list() -> None:
    request = good_submission()
    request.task.shapes.extend(task_pb2.ShapeVariant(name=f"bad name {i}") for i in range(20))
    with pytest.raises(ApiError) as caught:
        contract.check(request)
    assert caught.value.code.name == "INVALID_ARGUMENT"
    assert caught.value.message.count("task.shapes[") == contract.MAX_REPORTED
    assert caught.value.message.endswith("and 12 more")


def test_an_empty_import_archive_is_refused() -> None:
    assert contract.violations(lineage_pb2.ImportRunRequest()) == [
        "archive: must be at least 1 bytes (bytes.min_len)"
    ]
