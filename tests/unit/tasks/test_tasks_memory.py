"""Memory before running: the meta-device footprint, the device's free memory, and what they decide."""

from __future__ import annotations

import pytest

from kernelfoundry.tasks import memory, validation_child
from kernelfoundry.tasks.model import ShapeVariant, Task, TaskError
from kernelfoundry.tasks.validation_child import Placement, validate_shape

LINEAR = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)

    def forward(self, x):
        return torch.relu(self.linear(x))

batch, n_in, n_out = 8, 16, 32

def get_inputs():
    return [torch.randn(batch, n_in)]

def get_init_inputs():
    return [n_in, n_out]
"""
ON_CPU = Placement("cpu", "cpu", True)
HUGE = {"batch": 1 << 16, "n_in": 1 << 14, "n_out": 1 << 14}  # 4 GiB of input, 1 GiB of weights

MEMINFO = "MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\n"


def footprint(overrides: dict[str, int] | None = None) -> memory.Footprint:
    task = Task("linear", LINEAR)
    return memory.run_on_meta(task, ShapeVariant("s", overrides or {})).footprint


def test_the_meta_run_counts_inputs_weights_outputs_and_temporaries_without_allocating():
    counted = footprint(HUGE)
    assert counted.inputs_bytes == 4 * (1 << 16) * (1 << 14)
    assert counted.parameters_bytes == 4 * ((1 << 14) * (1 << 14) + (1 << 14))
    assert counted.outputs_bytes == 4 * (1 << 16) * (1 << 14)
    # The linear's result and relu's result are alive together at the peak.
    assert counted.peak_bytes >= 2 * counted.outputs_bytes
    assert counted.wide_inputs_bytes == 2 * counted.inputs_bytes


def test_the_need_adds_weights_one_input_set_the_peak_and_a_kept_output():
    counted = footprint()
    expected = counted.parameters_bytes + counted.inputs_bytes + counted.peak_bytes + counted.outputs_bytes
    assert counted.need_bytes == expected
    assert counted.wide_need_bytes == 2 * expected


def test_host_memory_is_mem_available_capped_by_the_child_limit():
    roomy = memory.host_memory(limit_bytes=64 << 30, used_bytes=0, meminfo_text=MEMINFO)
    assert (roomy.available_bytes, roomy.source) == (20000000 * 1024, "MemAvailable")
    tight = memory.host_memory(limit_bytes=4 << 30, used_bytes=1 << 30, meminfo_text=MEMINFO)
    assert tight.available_bytes == 3 << 30
    assert "limit of 4.0 GiB less 1.0 GiB in use" in tight.source
    assert tight.total_bytes == 24000000 * 1024


def fake_memory(monkeypatch: pytest.MonkeyPatch, available: int) -> None:
    monkeypatch.setattr(
        validation_child,
        "_device_memory",
        lambda device, limit: memory.DeviceMemory(device, available, 2 * available, "test"),
    )


def test_a_shape_too_large_for_the_run_device_is_refused_with_the_sizes(monkeypatch):
    fake_memory(monkeypatch, available=2 << 30)
    with pytest.raises(TaskError) as caught:
        validate_shape(Task("linear", LINEAR), ShapeVariant("huge", HUGE), ON_CPU, print)
    assert caught.value.reason == "resource_limit"
    message = caught.value.message
    assert "shape `huge` needs" in message and "inputs 4.00 GiB" in message and "weights 1.00 GiB" in message
    assert "2.00 GiB free of 4.00 GiB on cpu (test)" in message


def test_a_shape_too_large_for_a_stand_in_device_is_validated_by_structure_only(monkeypatch):
    fake_memory(monkeypatch, available=2 << 30)
    stand_in = Placement("cuda", "cpu", False, "no GPU here")
    summary = validate_shape(Task("linear", LINEAR), ShapeVariant("huge", HUGE), stand_in, print)
    assert summary["depth"] == "structure"
    assert summary["outputs"] == [{"shape": [1 << 16, 1 << 14], "dtype": "float32", "scalar": False}]
    assert summary["parameter_count"] == (1 << 14) * (1 << 14) + (1 << 14)
    assert summary["memory"]["inputs_bytes"] == 4 << 30


def test_without_room_for_a_float64_reference_the_reference_runs_in_float32(monkeypatch):
    counted = footprint()
    fake_memory(monkeypatch, available=counted.need_bytes + counted.wide_need_bytes // 2)
    summary = validate_shape(Task("linear", LINEAR), ShapeVariant("s", {}), ON_CPU, print)
    assert (summary["depth"], summary["reference_precision"]) == ("values", "float32 (TF32 off)")
    fake_memory(monkeypatch, available=counted.need_bytes + counted.wide_need_bytes)
    summary = validate_shape(Task("linear", LINEAR), ShapeVariant("s", {}), ON_CPU, print)
    assert summary["reference_precision"] == "float64"


def test_a_reference_the_meta_device_cannot_run_is_validated_on_the_device_without_an_estimate():
    source = LINEAR.replace("return torch.relu(self.linear(x))", "return x[x > 0].sum().reshape(1) + x.max()")
    summary = validate_shape(Task("masked", source), ShapeVariant("s", {}), ON_CPU, print)
    assert summary["memory"] is None and summary["depth"] == "values"


def test_on_a_stand_in_a_task_at_its_own_large_size_gets_values_checked_at_reduced_sizes(monkeypatch):
    # A CUDA run validated where CUDA is unavailable: the real size's structure, values at reduced sizes.
    source = LINEAR.replace("batch, n_in, n_out = 8, 16, 32", "batch, n_in, n_out = 65536, 4096, 4096")
    stand_in = Placement("cuda", "cpu", False, "no GPU here")
    monkeypatch.setattr(validation_child, "place", lambda requested: stand_in)
    summary = validation_child.validate_in_process(Task("big_linear", source), "cuda")
    (shape,) = summary["shapes"]
    assert shape["depth"] == "reduced_values"
    assert shape["outputs"] == [{"shape": [65536, 4096], "dtype": "float32", "scalar": False}]
    assert [check["policy"] for check in shape["output_checks"]] == ["tolerance"]
    assert any("values and output checks at reduced sizes {" in note for note in summary["notes"])
