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

The runner maps its output arena `guarded`: the pages after the arena's last are a PROT_NONE page of
its own, so a unit that writes past the end of its outputs faults there (a crash), whatever the
kernel placed after the mapping (another arena read-only, or writable memory of the runner's where
the write would have gone unseen). A write that stays inside the last page's slack past the last output
(less than a page, where the outputs do not end on a page boundary) lands in the arena's own padding,
which nothing reads.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import mmap
import os
import warnings
import weakref
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


_MAP_FIXED, _PROT_NONE = 0x10, 0  # Linux's, where Python's mmap module does not name them
_MAP_FAILED = ctypes.c_void_p(-1).value


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def _guarded_mapping(fd: int, size: int) -> Any:
    """`size` bytes of `fd` mapped shared and read-write, followed by a PROT_NONE page: a span of the
    pages plus one reserved inaccessible, the memfd mapped over its start. A ctypes array over the bytes
    (views of it keep it alive; the span is unmapped when the last one goes)."""
    libc, page = _libc(), mmap.PAGESIZE
    mapped = (size + page - 1) // page * page
    span = mapped + page
    base = libc.mmap(None, span, _PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if base in (None, _MAP_FAILED):
        raise OSError(ctypes.get_errno(), "cannot reserve the output arena's span")
    flags = mmap.MAP_SHARED | _MAP_FIXED
    at = libc.mmap(base, mapped, mmap.PROT_READ | mmap.PROT_WRITE, flags, fd, 0)
    if at != base:
        error = ctypes.get_errno()
        libc.munmap(base, span)
        raise OSError(error, "cannot map the output arena into its guarded span")
    view = (ctypes.c_char * size).from_address(base)
    weakref.finalize(view, libc.munmap, base, span)
    return view


class Arena:
    """A mapped memfd and tensor views into it; `guarded` (writable only): a PROT_NONE page after it."""

    def __init__(self, fd: int, size: int, writable: bool, guarded: bool = False) -> None:
        self.fd = fd
        self.size = size
        self.writable = writable
        if guarded and not writable:
            raise ValueError("a guarded arena is a writable one (inputs are read-only already)")
        if guarded:
            self.map: Any = _guarded_mapping(fd, size)
        else:
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
        # Tensors may still view the mapping (BufferError): it then goes with them (a guarded mapping
        # always does: it is unmapped when its last view goes).
        if isinstance(self.map, mmap.mmap):
            with contextlib.suppress(BufferError):
                self.map.close()
        self.map = None
        with contextlib.suppress(OSError):
            os.close(self.fd)
