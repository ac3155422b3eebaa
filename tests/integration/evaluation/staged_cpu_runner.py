"""The real runner (kernelfoundry.evaluation.runner), told that its CPU memory is staged.

A stand-in for a GPU in CI: inputs, parameters and outputs are copied into the runner's own tensors
as a CUDA runner copies them to its device, so the judge's staged path (drawn input sets from seeds,
refreshes by seed, host staging where draws are not reproducible, fetched outputs, input checks)
runs on a machine without one. Only the CUDA graph probe is left out (it needs a device).

Lent output memory (device_share.py) is stood in for by a memfd the judge lends (`HostLentMemory`):
the runner maps it read-write as a CUDA runner maps the judge's cuMemCreate memory, so a fetch through
lent memory runs here too; `--refuse-borrow` makes the runner fail to map it, as a host that refuses.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import Any

import torch

from kernelfoundry.evaluation import runner
from kernelfoundry.evaluation.backends.cpu import CPU, CpuRunnerDevice
from kernelfoundry.evaluation.device_share import ShareError
from kernelfoundry.evaluation.shared_memory import Arena, TensorSpec

REFUSE_BORROW = "--refuse-borrow"


class HostLentMemory:
    """What the judge lends, in host memory: LentMemory's interface over a memfd."""

    def __init__(self, nbytes: int) -> None:
        self.arena = Arena.create(nbytes, "kf-lent")
        self.fd = self.arena.fd
        self.size = self.arena.size
        self.closed = False

    def tensor(self, spec: TensorSpec) -> Any:
        return self.arena.tensor(spec)

    def close(self) -> None:
        self.closed = True
        self.arena.close()


class StagedCpuRunnerDevice(CpuRunnerDevice):
    def place(self, host: Any) -> Any:
        return host.clone()

    def blank(self, host: Any) -> Any:
        return torch.empty_like(host)

    def refresh(self, placed: Any, host: Any) -> None:
        placed.copy_(host)

    def fetch(self, placed: Any, host: Any) -> None:
        host.copy_(placed)

    def borrow(self, fd: int, size: int) -> Any:
        return Arena(os.dup(fd), size, writable=True)  # the runner closes `fd` once borrowed


STAGED_CPU = replace(CPU, memory="staged", runner_device=StagedCpuRunnerDevice)


def _refuse(self: StagedCpuRunnerDevice, fd: int, size: int) -> Any:
    raise ShareError("cuMemImportFromShareableHandle failed (CUDA driver status 801)")


def _not_applicable(self: runner.Runner, command: dict[str, Any], fds: list[int]) -> dict[str, Any]:
    return {"kind": "probed", "written": False, "note": "not applicable"}


if __name__ == "__main__":
    if REFUSE_BORROW in sys.argv:
        sys.argv.remove(REFUSE_BORROW)
        StagedCpuRunnerDevice.borrow = _refuse  # type: ignore[method-assign]
    runner.backend_for_device = lambda device: STAGED_CPU  # type: ignore[assignment]
    runner.Runner.probe = _not_applicable  # type: ignore[method-assign]
    runner.main()
