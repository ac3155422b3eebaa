"""The `kf` launcher poisons outputs in correctness trials only, never during timed runs."""

from __future__ import annotations

from typing import Any

import torch

from kernelfoundry.evaluation.glue_runtime import KernelLauncher


class RecordingUnit:
    def __init__(self) -> None:
        self.seen: list[float] = []

    def call(self, entry: str, inputs: Any, outputs: Any, stream: Any) -> None:
        self.seen.append(float(self.out[0]))

    out: torch.Tensor


def poison(t: torch.Tensor) -> None:
    t.fill_(float("nan"))


def test_outputs_are_poisoned_before_each_launch_in_trials_but_not_in_timed_runs() -> None:
    unit = RecordingUnit()
    out = torch.zeros(4)
    unit.out = out
    launcher = KernelLauncher(unit, lambda: None, poison)  # type: ignore[arg-type]
    launcher.launch("kf_part0", [torch.ones(4)], [out])
    assert torch.isnan(torch.tensor(unit.seen[-1]))
    out.fill_(3.0)
    launcher.poisoning = False
    launcher.launch("kf_part0", [torch.ones(4)], [out])
    assert unit.seen[-1] == 3.0
    assert launcher.launches == 2
