"""The backend registry: every fact the evaluation needs about a kind of device, in one table.

A backend is data (`Backend`: device kind, language, file suffix, ABI device code, memory strategy,
timed-run default, whether torch.compile is timed by default) plus two small strategies built from it:
`JudgeDevice` (the trusted side: stream, synchronise, L2/LLC flush, baseline timer, health) and
`RunnerDevice` (the untrusted side: where inputs live, how a call is timed, how outputs reach the judge).
Adding a backend is one new module here and one line in `BACKENDS`; nothing else branches on a backend.
Never imports torch at import time (the worker imports this package without torch).
"""

from __future__ import annotations

from kernelfoundry.evaluation.backends.base import Backend, JudgeDevice, RunnerDevice
from kernelfoundry.evaluation.backends.cpu import CPU
from kernelfoundry.evaluation.backends.cpu_clang import CPU_CLANG
from kernelfoundry.evaluation.backends.cuda import CUDA

BACKENDS: dict[str, Backend] = {backend.name: backend for backend in (CPU, CUDA, CPU_CLANG)}


def backend_named(name: str) -> Backend:
    """The registered backend `name`; ValueError naming the known ones otherwise."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend `{name}` (known: {', '.join(sorted(BACKENDS))})") from None


def backend_for_device(device: str) -> Backend:
    """The backend of a device string such as "cpu" or "cuda:0" (its part before the colon)."""
    kind = device.split(":", 1)[0]
    for backend in BACKENDS.values():
        if backend.device_kind == kind:
            return backend
    raise ValueError(f"no backend serves device `{device}` (known: {', '.join(sorted(BACKENDS))})")


__all__ = ["BACKENDS", "Backend", "JudgeDevice", "RunnerDevice", "backend_for_device", "backend_named"]
