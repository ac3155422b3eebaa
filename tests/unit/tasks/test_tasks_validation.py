"""Validating tasks: the reference runs in a child process; every rejection has its own reason.

Each case starts one child (about two seconds: it imports torch); the fixtures are tiny.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelfoundry.tasks.loading import load_task
from kernelfoundry.tasks.model import Task, TaskError, Tolerance
from kernelfoundry.tasks.summary import ShapeSummary, TaskSummary, TensorInfo
from kernelfoundry.tasks.validation import _watch, validate_task
from kernelfoundry.tasks.validation_child import default_tolerance, degeneracy

FIXTURES = Path(__file__).parents[2] / "fixtures" / "tasks"
INVALID = sorted((FIXTURES / "invalid").glob("*.py"))
HOG_MEMORY_LIMIT = 1 << 30  # resident bytes: above torch itself, reached by the memory hog within seconds
REASONS = (
    "import_error",
    "reference_error",
    "timeout",
    "resource_limit",
    "no_tensor_output",
    "degenerate_output",
)


def expected_reason(path: Path) -> str:
    return next(reason for reason in REASONS if path.stem.startswith(reason))


def test_valid_kernelbench_task_is_summarised():
    summary = validate_task(load_task(FIXTURES / "kernelbench_relu.py"), timeout_s=60)
    assert summary.task == "kernelbench_relu" and summary.device == "cpu"
    (shape,) = summary.shapes
    assert shape.name == "default"
    assert shape.inputs == (TensorInfo((4, 64), "float32"),)
    assert shape.outputs == (TensorInfo((4, 64), "float32"),)
    assert (shape.parameter_count, shape.buffer_count) == (0, 0)
    assert shape.reference_runtime_ms > 0


def test_every_shape_of_a_folder_task_is_run_with_its_overrides():
    summary = validate_task(load_task(FIXTURES / "scale_shift"), timeout_s=60)
    small, wide = summary.shapes
    assert (small.name, small.outputs, small.parameter_count) == (
        "small",
        (TensorInfo((4, 32), "float32"),),
        32 * 33,
    )
    assert (wide.name, wide.inputs, wide.parameter_count) == (
        "wide",
        (TensorInfo((2, 256), "float32"),),
        256 * 257,
    )


def test_python_scalar_inputs_are_recorded_as_scalars():
    source = (FIXTURES / "kernelbench_relu.py").read_text()
    source = source.replace(
        "def forward(self, x: torch.Tensor)", "def forward(self, x: torch.Tensor, k: int = 0)"
    )
    source = source.replace(
        "return [torch.randn(batch_size, dim)]", "return [torch.randn(batch_size, dim), 3]"
    )
    summary = validate_task(Task(name="with_scalar", reference_source=source), timeout_s=60)
    assert summary.shapes[0].inputs[1] == TensorInfo((), "int", scalar=True)


def test_a_daemon_forked_by_the_reference_does_not_stall_validation():
    source = (
        (FIXTURES / "kernelbench_relu.py")
        .read_text()
        .replace(
            "import torch\n",
            "import subprocess\nimport torch\n\nsubprocess.Popen(['setsid', 'sleep', '40'])\n",
            1,
        )
    )
    # The daemon outlives the deadline: waiting for it would end in `timeout`.
    summary = validate_task(Task(name="forks", reference_source=source), timeout_s=30)
    assert summary.shapes[0].outputs == (TensorInfo((4, 64), "float32"),)


# What each rejection message must say, by fixture.
MESSAGE_WORDS = {
    "import_error_missing_module": "kf_no_such_module",
    "reference_error_forward_raises": "RuntimeError",
    "reference_error_process_crashes": "SIGABRT",
    "timeout_forward_hangs": "did not finish within 10 s",
    "resource_limit_eats_memory": "memory",
    "no_tensor_output_returns_float": "returned float",
    "degenerate_output_zero": "(near) zero",
    "degenerate_output_constant": "(near) constant",
    "degenerate_output_ignores_inputs": "does not change when the inputs change",
    "degenerate_output_fixed_inputs": "same values for seeds",
    "degenerate_output_nan": "NaN",
}


def test_every_invalid_fixture_has_its_expected_message():
    assert sorted(MESSAGE_WORDS) == [path.stem for path in INVALID]


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_reference_is_rejected_with_its_reason_and_a_message_naming_the_problem(path):
    limits = {"timeout_s": 10 if path.stem.startswith("timeout") else 60}
    if path.stem.startswith("resource_limit"):
        limits["memory_limit_bytes"] = HOG_MEMORY_LIMIT
    with pytest.raises(TaskError) as caught:
        validate_task(load_task(path), **limits)
    error = caught.value
    assert error.reason == expected_reason(path), error.message
    assert f"task `{path.stem}`" in error.message
    assert MESSAGE_WORDS[path.stem] in error.message, error.message


def test_task_tolerance_reaches_the_child():
    # Outputs of order 1e-6 are "zero" under the default atol 1e-4, but not under the task's own.
    source = (FIXTURES / "kernelbench_relu.py").read_text().replace("torch.relu(x)", "torch.relu(x) * 1e-6")
    tight = Task(name="tiny", reference_source=source, tolerance=Tolerance(atol=1e-9, rtol=1e-6))
    assert validate_task(tight, timeout_s=60).shapes[0].outputs[0].shape == (4, 64)


def test_small_output_is_zero_under_the_default_tolerance_but_not_under_a_tighter_one():
    first, second = torch.rand(4, 64) * 1e-6, torch.rand(4, 64) * 1e-6
    assert "(near) zero" in degeneracy("out", first, second, True, default_tolerance("float32"))
    assert degeneracy("out", first, second, True, Tolerance(atol=1e-9, rtol=1e-6)) is None


def test_half_precision_outputs_are_judged_with_the_looser_half_tolerance():
    assert default_tolerance("bfloat16") == Tolerance(1e-2, 1e-2)
    assert default_tolerance("float32") == Tolerance(1e-4, 1e-4)
    assert default_tolerance("int64") == Tolerance(0.0, 0.0)


def test_a_single_element_output_is_not_called_constant():
    assert (
        degeneracy("out", torch.tensor([3.0]), torch.tensor([5.0]), True, default_tolerance("float32"))
        is None
    )


def test_an_output_unchanged_by_new_inputs_is_degenerate_only_if_the_inputs_changed():
    value = torch.randn(8, 8)
    tolerance = default_tolerance("float32")
    assert "does not change" in degeneracy("out", value, value.clone(), True, tolerance)
    assert degeneracy("out", value, value.clone(), False, tolerance) is None


def test_integer_outputs_are_compared_exactly():
    counts = torch.randint(0, 5, (32,))
    assert degeneracy("out", counts, counts + 1, True, default_tolerance("int64")) is None
    assert "(near) zero" in degeneracy("out", counts * 0, counts * 0, True, default_tolerance("int64"))


def test_summary_round_trips_through_its_json_form():
    summary = TaskSummary(
        task="t",
        device="cpu",
        shapes=(
            ShapeSummary(
                name="a",
                inputs=(TensorInfo((2, 3), "float32"), TensorInfo((), "float", scalar=True)),
                outputs=(TensorInfo((2,), "int64"),),
                parameter_count=6,
                buffer_count=1,
                reference_runtime_ms=0.25,
            ),
        ),
    )
    assert TaskSummary.from_dict(summary.to_dict()) == summary


def test_memory_watch_stops_a_child_whose_resident_size_passes_the_limit():
    # The watch used on GPUs, where an address-space rlimit would break CUDA.
    hog = "import time\nblock = bytearray(400 << 20)\ntime.sleep(30)\n"
    process = subprocess.Popen([sys.executable, "-c", hog])
    try:
        assert _watch(process, timeout_s=20, rss_limit=200 << 20) == (False, True)
    finally:
        process.kill()
        process.wait()


def test_memory_watch_reports_the_deadline():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert _watch(process, timeout_s=0.3, rss_limit=1 << 40) == (True, False)
    finally:
        process.kill()
        process.wait()
