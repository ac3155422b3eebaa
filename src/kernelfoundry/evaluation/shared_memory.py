"""Tensors in memfd shared memory: the judge allocates, the runner maps (inputs read-only).

An `Arena` is one memfd holding several tensors at 64-byte aligned offsets, described by `TensorSpec`s
(dtype, shape, offset) that travel as JSON while the fd travels with socket.send_fds. The judge maps
an arena read-write; the runner maps input arenas with PROT_READ only, so a unit that writes an input
faults instead of changing what the judge computes its reference from. A mapping with PROT_READ is
still a shared one: without more, a unit could mprotect it writable, write() to the descriptor or map
it again read-write, and change the judge's inputs after its call. So the judge seals an input arena
(`seal`: F_SEAL_FUTURE_WRITE, F_SEAL_SHRINK, F_SEAL_GROW) once its own mapping exists and before the
descriptor leaves: from then on only that mapping can write the memory (the judge's fresh values),
and every other way of writing it is refused by the kernel. Contiguous tensors only. Imports torch
lazily; never calls a unit.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import warnings
from dataclasses import dataclass
from typing import Any

ALIGNMENT = 64
# fcntl's names where Python has them (F_SEAL_FUTURE_WRITE is Linux 5.1+; the value is the kernel's).
F_SEAL_FUTURE_WRITE = getattr(fcntl, "F_SEAL_FUTURE_WRITE", 0x0010)
READ_ONLY_SEALS = F_SEAL_FUTURE_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
# dtypes that may cross the ABI and the channel; anything else is refused by name.
DTYPES = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
)


def dtype_name(dtype: Any) -> str:
    name = str(dtype).replace("torch.", "")
    if name not in DTYPES:
        raise ValueError(f"dtype {name} cannot cross between judge and runner (known: {', '.join(DTYPES)})")
    return name


def torch_dtype(name: str) -> Any:
    import torch

    if name not in DTYPES:
        raise ValueError(f"unknown dtype `{name}`")
    return getattr(torch, name)


@dataclass(frozen=True)
class TensorSpec:
    """Where one contiguous tensor lives inside an arena."""

    dtype: str
    shape: tuple[int, ...]
    offset: int

    @property
    def numel(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count

    @property
    def nbytes(self) -> int:
        return self.numel * torch_dtype(self.dtype).itemsize

    def to_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "shape": list(self.shape), "offset": self.offset}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TensorSpec:
        return cls(str(data["dtype"]), tuple(int(s) for s in data["shape"]), int(data["offset"]))


def layout(tensors: list[tuple[str, tuple[int, ...]]]) -> tuple[list[TensorSpec], int]:
    """Specs for (dtype, shape) pairs packed at aligned offsets, and the arena's total size."""
    specs: list[TensorSpec] = []
    offset = 0
    for dtype, shape in tensors:
        spec = TensorSpec(dtype_name(dtype) if not isinstance(dtype, str) else dtype, tuple(shape), offset)
        specs.append(spec)
        offset += (spec.nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
    return specs, max(offset, ALIGNMENT)


class Arena:
    """A mapped memfd and tensor views into it."""

    def __init__(self, fd: int, size: int, writable: bool) -> None:
        self.fd = fd
        self.size = size
        self.writable = writable
        access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
        self.map = mmap.mmap(fd, size, access=access)

    @classmethod
    def create(cls, size: int, name: str = "kf-arena") -> Arena:
        """A fresh read-write arena of `size` bytes (the judge's side)."""
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, size)
        return cls(fd, size, writable=True)

    def seal(self) -> None:
        """Only this (the creator's) mapping may write the memory from now on: no write(), no writable
        mapping, no mprotect to writable, no resize, through any descriptor of it (raises OSError where
        the kernel cannot seal)."""
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, READ_ONLY_SEALS)

    def sealed(self) -> bool:
        """Whether `seal` holds for this memory (as the kernel reports it, for any descriptor of it)."""
        try:
            seals = fcntl.fcntl(self.fd, fcntl.F_GET_SEALS)
        except OSError:
            return False
        return seals & READ_ONLY_SEALS == READ_ONLY_SEALS

    def address(self) -> int:
        """Where this process mapped the arena (the first byte)."""
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a read-only mapping is intended for inputs
            return int(torch.frombuffer(self.map, dtype=torch.uint8, count=1).data_ptr())

    def tensor(self, spec: TensorSpec) -> Any:
        """A tensor viewing the arena's bytes (writes go straight to shared memory where writable)."""
        import torch

        if spec.offset < 0 or spec.offset + spec.nbytes > self.size:
            raise ValueError(f"tensor at offset {spec.offset} of {spec.nbytes} bytes exceeds the arena")
        if spec.numel == 0:
            return torch.empty(spec.shape, dtype=torch_dtype(spec.dtype))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a read-only mapping is intended for inputs
            flat = torch.frombuffer(
                self.map, dtype=torch_dtype(spec.dtype), count=spec.numel, offset=spec.offset
            )
        return flat.view(spec.shape)

    def close(self) -> None:
        # Tensors may still view the mapping (BufferError): it then goes with them.
        with contextlib.suppress(BufferError):
            self.map.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)
