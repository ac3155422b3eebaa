"""A GPU's memory shared by its evaluations and the task validations beside them, on one host.

At KernelBench's sizes a level-1 task's evaluation holds tens of GB on its GPU (its input sets on both
sides of the sealed evaluation, the float64 reference's copies), and so does the validation of the next
submitted task, which runs the reference on the same GPU (kernelfoundry.tasks.validation). Beside each
other they ran an 80 GB H100 out of memory (level1/19, 24 and 34 with two runs at once: the judge's
"this process has 45.67 GiB in use" beside another process's 29 GiB, most likely a validation): the
executor's later deliveries retry, but nothing reserved the memory. Here evaluations are the readers of a
per-GPU host lock (kernelfoundry.stack.host_lock) and validations its writers: a validation waits for
the evaluation in flight to end and no new evaluation starts until it is done; evaluations never wait
for each other. Both waits are bounded (after them the work goes on as before, logged), and neither
counts against the work's own deadline.

A GPU is named as the process sees it: the CUDA_VISIBLE_DEVICES entry its `cuda:N` maps to (the
executors are pinned by index, kernelfoundry.stack.supervisor), or N where that variable is unset;
processes that name one GPU differently (an index here, a UUID there) do not exclude each other. CPU
devices take no lease. An empty folder turns the leases off (machines without a shared file system
between the validating and the evaluating process).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from kernelfoundry.stack.host_lock import HostLock
from kernelfoundry.telemetry.logging import get_logger

# An evaluation waits at most this long for a validation (the validation's own timeout is 120 s).
EVALUATION_WAIT_S = 180.0
# A validation waits at most this long for the evaluation in flight (most end within a minute).
VALIDATION_WAIT_S = 120.0
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
log = get_logger(__name__)


def physical_gpu(device: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The GPU `device` (`cuda`, `cuda:N`) names in a process with `environ`: its CUDA_VISIBLE_DEVICES
    entry, or N where that is unset; None for a CPU or an index past the visible devices."""
    if not device.startswith("cuda"):
        return None
    environ = os.environ if environ is None else environ
    _, _, number = device.partition(":")
    try:
        index = int(number) if number else 0
    except ValueError:
        return None
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return str(index)
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    return entries[index] if 0 <= index < len(entries) else None


def gpu_folder(base: Path, device: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """`base`'s folder for the physical GPU `device` names (physical_gpu); None for a CPU."""
    gpu = physical_gpu(device, environ)
    return None if gpu is None else base / f"gpu-{_UNSAFE.sub('_', gpu)}"


class DeviceLease:
    def __init__(self, folder: str | Path | None, environ: Mapping[str, str] | None = None) -> None:
        self.folder = Path(folder) if folder not in (None, "") else None
        self.environ = environ

    def _lock(self, device: str) -> HostLock | None:
        folder = gpu_folder(self.folder, device, self.environ) if self.folder is not None else None
        return None if folder is None else HostLock(folder)

    def evaluating(
        self, device: str, wait_s: float = EVALUATION_WAIT_S
    ) -> contextlib.AbstractContextManager[bool | None]:
        """Held around one evaluation on `device`: True held, False not taken in time, None no lease."""
        return self._held(device, wait_s, exclusive=False)

    def validating(
        self, device: str, wait_s: float = VALIDATION_WAIT_S
    ) -> contextlib.AbstractContextManager[bool | None]:
        """Held around one validation on `device`: the evaluation in flight ends first, none starts."""
        return self._held(device, wait_s, exclusive=True)

    @contextlib.contextmanager
    def _held(self, device: str, wait_s: float, exclusive: bool) -> Iterator[bool | None]:
        lock = self._lock(device)
        if lock is None:
            yield None
            return
        with contextlib.ExitStack() as stack:
            taken: bool | None
            try:
                taken = stack.enter_context(lock.exclusive(wait_s) if exclusive else lock.shared(wait_s))
            except OSError as exc:  # an unwritable folder: the work goes on without a lease
                log.warning(
                    "device lease unavailable", device=device, folder=str(lock.folder), error=repr(exc)
                )
                taken = None
            if taken is False:
                log.warning(
                    "device lease not taken in time; going on without it",
                    device=device,
                    waited_s=wait_s,
                    role="validation" if exclusive else "evaluation",
                )
            yield taken
