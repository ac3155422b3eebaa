"""Building a task's reference: deterministic parameters and inputs, inputs drawn on the target device."""

from __future__ import annotations

from pathlib import Path

import torch

from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.tasks.reference import instantiate

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
