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
OOM_PLACING = "--oom-placing"  # placing a buffer fails as a device whose memory others hold
COMPUTE_AT_FETCH = "--compute-at-fetch"  # timed calls do nothing; the unit runs when outputs are fetched


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


def _out_of_memory(self: StagedCpuRunnerDevice, host: Any) -> Any:
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB")


_honest_call = runner.Runner.call
_honest_fetch = runner.Runner.fetch
_pending: list[tuple[int, int]] = []


def _lazy_call(self: runner.Runner, command: dict[str, Any], fds: list[int]) -> dict[str, Any]:
    """A runner that does the work of a timed call only if its outputs are asked for."""
    if command.get("trial"):
        return _honest_call(self, command, fds)
    binding, index = self.shapes[int(command["shape"])], int(command["set"])
    if command.get("refresh_seed") is not None and binding.draws is not None:
        self._redraw(binding, index, int(command["refresh_seed"]))  # fresh values, as an honest call
    _pending[:] = [(int(command["shape"]), index)]
    return {"kind": "called", "claimed_ns": 1_000, "launches": 1, "outputs": []}


def _fetch_computes(self: runner.Runner, command: dict[str, Any], fds: list[int]) -> dict[str, Any]:
    for shape, index in _pending:
        self._invoke(self.shapes[shape], index, trial=False)
    _pending.clear()
    return _honest_fetch(self, command, fds)


def _not_applicable(self: runner.Runner, command: dict[str, Any], fds: list[int]) -> dict[str, Any]:
    return {"kind": "probed", "written": False, "note": "not applicable"}


if __name__ == "__main__":
    if REFUSE_BORROW in sys.argv:
        sys.argv.remove(REFUSE_BORROW)
        StagedCpuRunnerDevice.borrow = _refuse  # type: ignore[method-assign]
    if COMPUTE_AT_FETCH in sys.argv:
        sys.argv.remove(COMPUTE_AT_FETCH)
        runner.Runner.call = _lazy_call  # type: ignore[method-assign]
        runner.Runner.fetch = _fetch_computes  # type: ignore[method-assign]
    if OOM_PLACING in sys.argv:
        sys.argv.remove(OOM_PLACING)
        StagedCpuRunnerDevice.blank = _out_of_memory  # type: ignore[method-assign]
    runner.backend_for_device = lambda device: STAGED_CPU  # type: ignore[assignment]
    runner.Runner.probe = _not_applicable  # type: ignore[method-assign]
    runner.main()
