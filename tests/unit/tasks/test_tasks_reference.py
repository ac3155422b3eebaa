"""Building a task's reference: deterministic parameters and inputs drawn on the device; mistakes named."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelfoundry.tasks.model import ShapeVariant, Task, TaskError
from kernelfoundry.tasks.reference import forward_arity_problem, instantiate

TASKS = Path(__file__).resolve().parents[3] / "tasks"


def rms_task() -> Task:
    overrides = {"batch_size": 2, "features": 4, "dim1": 3, "dim2": 5}
    return Task("rms", (TASKS / "level1_rms_norm.py").read_text(), shapes=(ShapeVariant("small", overrides),))


def test_the_same_seed_gives_the_same_inputs_and_another_seed_other_inputs() -> None:
    task = rms_task()
    a, b, c = (instantiate(task, task.shapes[0], seed) for seed in (1, 1, 2))
    assert torch.equal(a.inputs[0], b.inputs[0])
    assert not torch.equal(a.inputs[0], c.inputs[0])
    assert a.inputs[0].shape == (2, 4, 3, 5)


def test_inputs_are_drawn_by_factory_calls_on_the_device_not_copied_from_the_host() -> None:
    """On the meta device nothing is materialised: a host-drawn tensor would have been drawn anyway."""
    task = rms_task()
    calls: list[torch.device] = []
    real_randn = torch.randn

    def spy(*args: object, **kwargs: object) -> torch.Tensor:
        out = real_randn(*args, **kwargs)  # type: ignore[arg-type]
        calls.append(out.device)
        return out

    torch.randn = spy  # type: ignore[assignment]
    try:
        ref = instantiate(task, task.shapes[0], seed=1, device="meta")
    finally:
        torch.randn = real_randn  # type: ignore[assignment]
    assert calls == [torch.device("meta")]
    assert ref.inputs[0].device.type == "meta"


BUILT_ON = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 4)
        self.where = torch.empty(1).device
        HOST_ONLY

    def forward(self, x):
        return self.linear(x)

def get_inputs():
    return [torch.randn(2, 8)]
"""


def test_the_model_is_built_on_the_device_not_initialised_on_the_host_and_moved() -> None:
    task = Task("built_on", BUILT_ON.replace("HOST_ONLY", "pass"))
    ref = instantiate(task, task.shapes[0], seed=1, device="meta")
    assert ref.model.where == torch.device("meta")  # factory calls in __init__ ran on the device
    assert ref.model.linear.weight.device.type == "meta"


def test_a_model_that_cannot_be_built_on_the_device_is_built_on_the_host_and_moved() -> None:
    # .numpy() needs host memory: __init__ fails on the meta device and succeeds on the host
    task = Task("built_on", BUILT_ON.replace("HOST_ONLY", "torch.zeros(2).numpy()"))
    ref = instantiate(task, task.shapes[0], seed=1, device="meta")
    assert ref.model.where == torch.device("cpu")
    assert ref.model.linear.weight.device.type == "meta"
    host = instantiate(task, task.shapes[0], seed=1)
    again = instantiate(task, task.shapes[0], seed=1)
    assert torch.equal(host.model.linear.weight, again.model.linear.weight)  # seed 0 for parameters


RELU = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, scale=1.0):
        super().__init__()
        self.scale = scale

    def forward(self, x, k=1):
        return torch.relu(x) * self.scale * k

def get_inputs():
    return INPUTS

def get_init_inputs():
    return INIT
"""


def relu_task(inputs: str, init: str = "[]") -> Task:
    return Task("relu", RELU.replace("INPUTS", inputs).replace("INIT", init))


@pytest.mark.parametrize(
    ("inputs", "init", "reason", "words"),
    [
        ("torch.randn(256, 16)", "[]", "bad_inputs", "returned a bare tensor of shape [256, 16]"),
        ("[torch.randn(4), 'fast']", "[]", "bad_inputs", "get_inputs() item 1 is a str"),
        ("[torch.randn(4), None]", "[]", "bad_inputs", "get_inputs() item 1 is a NoneType"),
        ("{'x': torch.randn(4)}", "[]", "bad_inputs", "get_inputs() returned a dict"),
        ("1 / 0", "[]", "bad_inputs", "get_inputs() raised ZeroDivisionError"),
        ("[torch.randn(4)]", "2.0", "bad_init_inputs", "get_init_inputs() returned a float"),
        ("[torch.randn(4)]", "[1.0, 2.0]", "bad_init_inputs", "cannot take the 2 argument(s)"),
        ("[torch.randn(4)]", "[torch.ones(2)]", "reference_error", "building Model"),
    ],
)
def test_input_mistakes_are_named_as_such(inputs: str, init: str, reason: str, words: str) -> None:
    if init == "[torch.ones(2)]":
        # A Model that accepts its arguments but fails inside __init__ is the reference's own error.
        task = Task("relu", relu_task(inputs, init).reference_source.replace("self.scale = scale", "1 / 0"))
    else:
        task = relu_task(inputs, init)
    with pytest.raises(TaskError) as caught:
        instantiate(task, task.shapes[0], seed=0)
    assert caught.value.reason == reason
    assert words in caught.value.message, caught.value.message


def test_python_numbers_are_valid_inputs_and_forward_arity_is_checked_before_calling() -> None:
    task = relu_task("[torch.randn(4), 3]")
    ref = instantiate(task, task.shapes[0], seed=0)
    assert ref.inputs[1] == 3
    assert forward_arity_problem(ref.model, ref.inputs) is None
    problem = forward_arity_problem(ref.model, [*ref.inputs, 1, 2])
    assert problem is not None and "cannot take the 4 input(s)" in problem and "tensor [4], int" in problem
