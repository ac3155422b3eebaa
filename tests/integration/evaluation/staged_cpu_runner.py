"""The real runner (kernelfoundry.evaluation.runner), told that its CPU memory is staged.

A stand-in for a GPU in CI: inputs, parameters and outputs are copied into the runner's own tensors
as a CUDA runner copies them to its device, so the judge's staged path (drawn input sets from seeds,
refreshes by seed, host staging where draws are not reproducible, fetched outputs, input checks)
runs on a machine without one. Only the CUDA graph probe is left out (it needs a device).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kernelfoundry.evaluation import runner
from kernelfoundry.evaluation.backends.cpu import CPU, CpuRunnerDevice


class StagedCpuRunnerDevice(CpuRunnerDevice):
    def place(self, host: Any) -> Any:
        return host.clone()

    def refresh(self, placed: Any, host: Any) -> None:
        placed.copy_(host)

    def fetch(self, placed: Any, host: Any) -> None:
        host.copy_(placed)


STAGED_CPU = replace(CPU, memory="staged", runner_device=StagedCpuRunnerDevice)


def _not_applicable(self: runner.Runner, command: dict[str, Any], fds: list[int]) -> dict[str, Any]:
    return {"kind": "probed", "written": False, "note": "not applicable"}


if __name__ == "__main__":
    runner.backend_for_device = lambda device: STAGED_CPU  # type: ignore[assignment]
    runner.Runner.probe = _not_applicable  # type: ignore[method-assign]
    runner.main()
