"""Validating tasks: the reference runs in a (sandboxed) child process; every rejection has its own reason.

Each case starts one child (a few seconds: it imports torch); the fixtures are tiny. The rules the child
applies are tested without a child in test_tasks_degeneracy.py, test_tasks_memory.py and
test_tasks_reference.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelfoundry.tasks.loading import load_task
from kernelfoundry.tasks.model import Task, TaskError, Tolerance
from kernelfoundry.tasks.summary import (
    OUTPUT_CHECK_INPUT_INDEPENDENT,
    OUTPUT_CHECK_SCALE_AWARE,
    OUTPUT_CHECK_TOLERANCE,
    MemoryEstimate,
    OutputCheck,
    ShapeSummary,
    TaskSummary,
    TensorInfo,
)
from kernelfoundry.tasks.validation import (
    MAX_RESULT_BYTES,
    _died,
    _records,
    _watch,
    cache_key,
    device_for_hardware,
    validate_task,
)
from kernelfoundry.tasks.validation_child import validate_in_process

FIXTURES = Path(__file__).parents[2] / "fixtures" / "tasks"
INVALID = sorted((FIXTURES / "invalid").glob("*.py"))
INPUT_INDEPENDENT = sorted((FIXTURES / "input_independent").glob("*.py"))
HOG_MEMORY_LIMIT = 1 << 30  # resident bytes: above torch itself, reached by the memory hog within seconds
REASONS = (
    "bad_inputs",
    "bad_init_inputs",
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
    assert [check.policy for check in shape.output_checks] == [OUTPUT_CHECK_TOLERANCE]
    assert shape.memory is not None and shape.memory.inputs_bytes == 4 * 64 * 4
    assert shape.reference_precision == "float64" and shape.depth == "values"


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
            "import subprocess\nimport torch\n\nsubprocess.Popen(['setsid', 'sleep', '300'])\n",
            1,
        )
    )
    # The daemon outlives the deadline (generous: a loaded machine takes long to import torch): waiting
    # for it would end in `timeout`.
    summary = validate_task(Task(name="forks", reference_source=source), timeout_s=120)
    assert summary.shapes[0].outputs == (TensorInfo((4, 64), "float32"),)


# What each rejection message must say, by fixture.
MESSAGE_WORDS = {
    "bad_inputs_bare_tensor": "get_inputs() returned a bare tensor of shape [256, 16]",
    "bad_inputs_not_a_tensor": "get_inputs() item 1 is a str",
    "bad_inputs_forward_arity": "cannot take the 1 input(s) get_inputs() returned (tensor [16, 16])",
    "bad_init_inputs_arity": "cannot take the 3 argument(s) get_init_inputs() returned (int, int, int)",
    "bad_init_inputs_not_a_list": "get_init_inputs() returned a int",
    "import_error_missing_module": "kf_no_such_module",
    "reference_error_forward_raises": "RuntimeError",
    "reference_error_process_crashes": "SIGABRT",
    "timeout_forward_hangs": "did not finish within 10 s",
    "resource_limit_eats_memory": "memory",
    "resource_limit_too_large_for_device": "needs 6144.00 GiB (inputs 2048.00 GiB",
    "no_tensor_output_returns_float": "returned float",
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
    default = Task(name="tiny", reference_source=source)
    assert validate_task(tight, timeout_s=60).shapes[0].output_checks[0].policy == OUTPUT_CHECK_TOLERANCE
    assert validate_task(default, timeout_s=60).shapes[0].output_checks[0].policy == OUTPUT_CHECK_SCALE_AWARE


@pytest.mark.parametrize("path", INPUT_INDEPENDENT, ids=lambda p: p.stem)
def test_an_output_that_ignores_the_inputs_is_accepted_and_said_so(path):
    summary = validate_task(load_task(path), timeout_s=60)
    assert [check.policy for check in summary.shapes[0].output_checks] == [OUTPUT_CHECK_INPUT_INDEPENDENT]
    assert any("does not depend on the inputs" in note for note in summary.notes)


def test_a_second_validation_of_the_same_task_comes_from_the_cache(tmp_path, monkeypatch):
    task = load_task(FIXTURES / "kernelbench_relu.py")
    first = validate_task(task, timeout_s=60, cache_dir=tmp_path)

    def no_child(*args, **kwargs):
        raise AssertionError("the cached summary should have been used")

    monkeypatch.setattr("kernelfoundry.tasks.validation._validate_in_child", no_child)
    assert validate_task(task, timeout_s=60, cache_dir=tmp_path) == first
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_the_cache_key_changes_with_what_decides_the_outcome():
    task = load_task(FIXTURES / "kernelbench_relu.py")
    key = cache_key(task, "cpu")
    assert cache_key(task, "cpu") == key
    assert cache_key(task, "cuda") != key
    assert cache_key(Task(task.name, task.reference_source + "\n# edited\n"), "cpu") != key
    assert cache_key(Task(task.name, task.reference_source, tolerance=Tolerance(1e-3, 1e-3)), "cpu") != key


def test_an_unreadable_cache_entry_is_validated_again(tmp_path):
    task = load_task(FIXTURES / "kernelbench_relu.py")
    (tmp_path / f"{cache_key(task, 'cpu')}.json").write_text("{not json")
    assert validate_task(task, timeout_s=60, cache_dir=tmp_path).task == "kernelbench_relu"


def test_a_child_answer_over_the_size_limit_is_not_read(tmp_path):
    result = tmp_path / "result.jsonl"
    result.write_text('{"progress": "' + "x" * MAX_RESULT_BYTES + '"}\n')
    assert _records(result) == ([], True)
    result.write_text('{"progress": "a"}\nnot json\n{"summary": {}}\n')
    assert _records(result) == ([{"progress": "a"}, {"summary": {}}], False)


def test_the_run_hardware_names_the_device_validation_runs_on():
    assert device_for_hardware("cuda.h200") == "cuda"
    assert device_for_hardware("cuda") == "cuda"
    assert device_for_hardware("cpu.x86_64") == "cpu"


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
                output_checks=(OutputCheck("scale_aware", "tiny"),),
                reference_precision="float32 (TF32 off)",
                memory=MemoryEstimate("cuda:0", 1, 2, 3, 4, 5, 6, 7, 8),
                depth="structure",
            ),
        ),
        requested_device="cuda",
        notes=("no GPU",),
    )
    assert TaskSummary.from_dict(summary.to_dict()) == summary


def test_a_summary_recorded_before_the_policy_fields_still_reads():
    old = {
        "task": "t",
        "device": "cpu",
        "shapes": [
            {
                "name": "a",
                "inputs": [{"shape": [2], "dtype": "float32", "scalar": False}],
                "outputs": [{"shape": [2], "dtype": "float32", "scalar": False}],
                "parameter_count": 0,
                "buffer_count": 0,
                "reference_runtime_ms": 1.0,
            }
        ],
    }
    shape = TaskSummary.from_dict(old).shapes[0]
    assert (shape.output_checks, shape.memory, shape.depth) == ((), None, "values")


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


def test_a_cuda_run_on_a_machine_without_cuda_is_validated_on_the_cpu_and_says_why():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    summary = validate_in_process(load_task(FIXTURES / "kernelbench_relu.py"), "cuda")
    assert (summary["device"], summary["requested_device"]) == ("cpu", "cuda")
    assert "CUDA is unavailable in the validation child (" in summary["notes"][0]
    assert summary["shapes"][0]["depth"] == "values"  # the stand-in CPU holds it: values are checked


def test_a_reference_that_dies_is_refused_with_its_exception_line_first():
    """The API caps a message at 1,000 characters: the exception's own line comes before the traceback
    (a KernelBench task's refusal on the H200 was cut inside the traceback, its cause lost)."""
    frame = '  File "module.py", line {}, in _call_impl\n    return forward_call()\n'
    frames = "".join(frame.format(n) for n in range(40))
    cause = "RuntimeError: max_pool1d() output size is too small"
    tail = f"Traceback (most recent call last):\n{frames}{cause}\n"
    error = _died(Task(name="t", reference_source=""), 1, "timing forward()", tail.strip(), 1 << 30)
    assert error.reason == "reference_error"
    assert error.message[:1000].count(cause) == 1
    assert error.message.index("RuntimeError") < error.message.index("Traceback")
