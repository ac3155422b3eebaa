"""Device memory the judge lends the runner by file descriptor, so outputs are fetched inside the device.

A staged device's outputs reach the judge through page-locked host memory: the runner's device, the
host arena, the judge's device (about 0.36 s a checked call for a 6.4 GB output on the H200, most of a
level-1 evaluation). Legacy CUDA IPC handles were refused across the sandbox on the H200 (ipc_probe.py,
bench/results/h200_2026-12-04); memory created with the virtual memory management API can instead be
exported as a POSIX file descriptor, which travels like the channel and the memfd arenas.

`LentMemory` (the judge): one cuMemCreate allocation holding a shape's outputs, mapped read-write
here, exported once as a descriptor that goes with the bind command. `BorrowedMemory` (the runner):
imports the descriptor and maps the same memory; a fetch is then a device-to-device copy into it. The
lent memory holds outputs only, nothing the judge computes from, and the judge clones what it reads
before comparing, so a runner writing into it later changes nothing the judge decided on. Anything that
fails here (an old driver, a host that refuses the export or the import) leaves the staged host path in
place. Driver API through ctypes; torch only makes the primary context current and views the memory.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from typing import Any

from kernelfoundry.evaluation.shared_memory import TensorSpec, torch_dtype

_HANDLE_TYPE_POSIX_FD = 1
_ALLOCATION_PINNED = 1
_LOCATION_DEVICE = 1
PROT_READ = 1
PROT_READ_WRITE = 3


class ShareError(Exception):
    """The driver refused a step of lending or borrowing device memory (the message names which)."""


class _Location(ctypes.Structure):  # CUmemLocation
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocationProp(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [
        ("type", ctypes.c_int),
        ("requested_handle_types", ctypes.c_int),
        ("location", _Location),
        ("win32_metadata", ctypes.c_void_p),
        ("alloc_flags", ctypes.c_ubyte * 8),
    ]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_DRIVER: Any = None


def driver() -> Any:
    """libcuda with the signatures of the virtual memory management calls used here."""
    global _DRIVER
    if _DRIVER is None:
        cuda = ctypes.CDLL("libcuda.so.1")
        u64, size_t, p = ctypes.c_uint64, ctypes.c_size_t, ctypes.POINTER
        cuda.cuMemGetAllocationGranularity.argtypes = [p(size_t), p(_AllocationProp), ctypes.c_int]
        cuda.cuMemCreate.argtypes = [p(u64), size_t, p(_AllocationProp), u64]
        cuda.cuMemExportToShareableHandle.argtypes = [ctypes.c_void_p, u64, ctypes.c_int, u64]
        cuda.cuMemImportFromShareableHandle.argtypes = [p(u64), ctypes.c_void_p, ctypes.c_int]
        cuda.cuMemAddressReserve.argtypes = [p(u64), size_t, size_t, u64, u64]
        cuda.cuMemAddressFree.argtypes = [u64, size_t]
        cuda.cuMemMap.argtypes = [u64, size_t, size_t, u64, u64]
        cuda.cuMemUnmap.argtypes = [u64, size_t]
        cuda.cuMemRelease.argtypes = [u64]
        cuda.cuMemSetAccess.argtypes = [u64, size_t, p(_AccessDesc), size_t]
        _DRIVER = cuda
    return _DRIVER


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise ShareError(f"{what} failed (CUDA driver status {rc})")


def create_shareable(cuda: Any, nbytes: int, device: int) -> tuple[int, int]:
    """(allocation handle, size rounded up to the granularity) of device memory exportable as a file
    descriptor."""
    prop = _AllocationProp(_ALLOCATION_PINNED, _HANDLE_TYPE_POSIX_FD, _Location(_LOCATION_DEVICE, device))
    granularity = ctypes.c_size_t()
    _check(
        cuda.cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(prop), 0),
        "cuMemGetAllocationGranularity",
    )
    size = max(1, -(-nbytes // granularity.value)) * granularity.value
    handle = ctypes.c_uint64()
    _check(cuda.cuMemCreate(ctypes.byref(handle), size, ctypes.byref(prop), 0), "cuMemCreate")
    return handle.value, size


def export_fd(cuda: Any, handle: int) -> int:
    """A file descriptor for the allocation `handle` (the caller closes it)."""
    fd = ctypes.c_int(-1)
    _check(
        cuda.cuMemExportToShareableHandle(ctypes.byref(fd), handle, _HANDLE_TYPE_POSIX_FD, 0),
        "cuMemExportToShareableHandle",
    )
    return fd.value


def import_fd(cuda: Any, fd: int) -> int:
    """The allocation handle of the memory behind descriptor `fd`."""
    handle = ctypes.c_uint64()
    _check(
        cuda.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd), _HANDLE_TYPE_POSIX_FD),
        "cuMemImportFromShareableHandle",
    )
    return handle.value


def map_shared(cuda: Any, handle: int, size: int, device: int, access: int) -> int:
    """The device address of a fresh mapping of allocation `handle` with `access` on `device`."""
    pointer = ctypes.c_uint64()
    _check(cuda.cuMemAddressReserve(ctypes.byref(pointer), size, 0, 0, 0), "cuMemAddressReserve")
    try:
        _check(cuda.cuMemMap(pointer.value, size, 0, handle, 0), "cuMemMap")
        desc = _AccessDesc(_Location(_LOCATION_DEVICE, device), access)
        rc = cuda.cuMemSetAccess(pointer.value, size, ctypes.byref(desc), 1)
        if rc != 0:
            cuda.cuMemUnmap(pointer.value, size)
            _check(rc, "cuMemSetAccess")
    except ShareError:
        cuda.cuMemAddressFree(pointer.value, size)
        raise
    return pointer.value


def view(address: int, nbytes: int) -> Any:
    """A uint8 CUDA tensor over `nbytes` bytes at device `address` (no copy, no ownership)."""
    import torch

    class _Interface:
        def __init__(self) -> None:
            self.__cuda_array_interface__ = {
                "shape": (nbytes,),
                "typestr": "|u1",
                "data": (address, False),
                "version": 3,
            }

    return torch.as_tensor(_Interface(), device="cuda")


def _tensor(address: int, size: int, spec: TensorSpec) -> Any:
    if spec.offset < 0 or spec.offset + spec.nbytes > size:
        raise ValueError(f"tensor at offset {spec.offset} of {spec.nbytes} bytes exceeds the lent memory")
    import torch

    if spec.numel == 0:
        return torch.empty(spec.shape, dtype=torch_dtype(spec.dtype), device="cuda")
    return view(address + spec.offset, spec.nbytes).view(torch_dtype(spec.dtype)).view(spec.shape)


class _Mapped:
    """One mapping of an allocation in this process, released once."""

    def __init__(self, cuda: Any, handle: int, address: int, size: int) -> None:
        self._cuda = cuda
        self.handle = handle
        self.address = address
        self.size = size
        self.closed = False

    def tensor(self, spec: TensorSpec) -> Any:
        """A tensor viewing the memory at `spec` (valid until `close`)."""
        return _tensor(self.address, self.size, spec)

    def close(self) -> None:
        """Unmap and drop this process's reference (the memory goes when the last process lets go)."""
        if self.closed:
            return
        self.closed = True
        self._cuda.cuMemUnmap(self.address, self.size)
        self._cuda.cuMemAddressFree(self.address, self.size)
        self._cuda.cuMemRelease(self.handle)


class LentMemory(_Mapped):
    """The judge's side: memory it creates, maps read-write, and lends by descriptor."""

    def __init__(self, cuda: Any, handle: int, address: int, size: int, fd: int) -> None:
        super().__init__(cuda, handle, address, size)
        self.fd = fd

    @classmethod
    def create(cls, nbytes: int, device: int) -> LentMemory:
        """Fresh lendable memory of at least `nbytes` on `device` (ShareError where the host refuses)."""
        cuda = driver()
        handle, size = create_shareable(cuda, nbytes, device)
        try:
            address = map_shared(cuda, handle, size, device, PROT_READ_WRITE)
        except ShareError:
            cuda.cuMemRelease(handle)
            raise
        try:
            fd = export_fd(cuda, handle)
        except ShareError:
            _Mapped(cuda, handle, address, size).close()
            raise
        return cls(cuda, handle, address, size, fd)

    def close(self) -> None:
        if not self.closed:
            with contextlib.suppress(OSError):
                os.close(self.fd)
        super().close()


class BorrowedMemory(_Mapped):
    """The runner's side: the judge's lent memory, imported from its descriptor and mapped here."""

    @classmethod
    def open(cls, fd: int, size: int, device: int) -> BorrowedMemory:
        """Map the memory behind `fd` (`size` bytes, the judge's figure) read-write on `device`."""
        cuda = driver()
        handle = import_fd(cuda, fd)
        try:
            address = map_shared(cuda, handle, size, device, PROT_READ_WRITE)
        except ShareError:
            cuda.cuMemRelease(handle)
            raise
        return cls(cuda, handle, address, size)
