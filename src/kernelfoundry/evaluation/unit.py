"""Loading a compiled unit and calling its entry points through the kf ABI (kf_abi.h).

Builds kf_tensor descriptors (DLPack's DLTensor layout) for torch tensors and calls
`int entry(const kf_tensor*, int32_t, kf_tensor*, int32_t, void* stream)`. Runs only inside the
untrusted runner process (runner.py): a unit is untrusted native code. Never catches a crash (it cannot).
"""

from __future__ import annotations

import ctypes
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernelfoundry.abi import ABI_VERSION
from kernelfoundry.evaluation.reasons import (
    ABI_MISMATCH,
    KERNEL_ERROR,
    LOAD_ERROR,
    MISSING_ENTRY_POINT,
    EvaluationFailure,
)

KF_DEVICE_CPU = 1
KF_DEVICE_CUDA = 2
KF_DTYPE_INT, KF_DTYPE_UINT, KF_DTYPE_FLOAT, KF_DTYPE_BFLOAT, KF_DTYPE_BOOL = 0, 1, 2, 4, 6


class KfDevice(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32))


class KfDtype(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16))


class KfTensor(ctypes.Structure):
    _fields_ = (
        ("data", ctypes.c_void_p),
        ("device", KfDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", KfDtype),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    )


ENTRY_SIGNATURE = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.POINTER(KfTensor),
    ctypes.c_int32,
    ctypes.POINTER(KfTensor),
    ctypes.c_int32,
    ctypes.c_void_p,
)


def dtype_code(dtype: Any) -> tuple[int, int]:
    """(kf_dtype_code, bits) of a torch dtype."""
    import torch

    if dtype == torch.bool:
        return KF_DTYPE_BOOL, 8
    if dtype == torch.bfloat16:
        return KF_DTYPE_BFLOAT, 16
    if dtype.is_floating_point:
        return KF_DTYPE_FLOAT, torch.finfo(dtype).bits
    if dtype.is_complex:
        raise EvaluationFailure(KERNEL_ERROR, f"complex tensors ({dtype}) are not part of kf ABI v1")
    bits = torch.iinfo(dtype).bits
    return (KF_DTYPE_UINT if dtype == torch.uint8 else KF_DTYPE_INT), bits


class DescriptorArray:
    """kf_tensor descriptors for a list of tensors; keeps the shape/stride arrays alive."""

    def __init__(self, tensors: Sequence[Any]) -> None:
        self.tensors = list(tensors)
        self.array = (KfTensor * max(1, len(self.tensors)))()
        self._keep: list[Any] = []
        for i, t in enumerate(self.tensors):
            shape = (ctypes.c_int64 * max(1, t.dim()))(*t.shape)
            strides = (ctypes.c_int64 * max(1, t.dim()))(*t.stride())
            self._keep += [shape, strides]
            code, bits = dtype_code(t.dtype)
            device = KfDevice(KF_DEVICE_CUDA if t.is_cuda else KF_DEVICE_CPU, t.device.index or 0)
            self.array[i] = KfTensor(
                ctypes.c_void_p(t.data_ptr()), device, t.dim(), KfDtype(code, bits, 1), shape, strides, 0
            )

    def __len__(self) -> int:
        return len(self.tensors)


def as_tensors(values: Sequence[Any], device: Any) -> list[Any]:
    """Python scalars become 0-d tensors (bool, int64, float32 as torch infers them)."""
    import torch

    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, bool | int | float):
            out.append(torch.tensor(v, device=device))
        else:
            raise EvaluationFailure(
                KERNEL_ERROR, f"an input of type {type(v).__name__} cannot cross kf ABI v1"
            )
    return out


class CompiledUnit:
    """A loaded shared library exporting kf ABI entry points."""

    def __init__(self, artifact: Path, name: str | None = None) -> None:
        shown = name or Path(artifact).name
        # dlopen returns the already-loaded handle for a path it has seen, static state included: every
        # evaluation loads a private copy (unlinked once mapped) so no state leaks between evaluations.
        try:
            with tempfile.NamedTemporaryFile(prefix="kf-unit-", suffix=".so", delete=False) as copy:
                copy.write(Path(artifact).read_bytes())
            try:
                self.library = ctypes.CDLL(copy.name, mode=ctypes.RTLD_LOCAL)
            finally:
                os.unlink(copy.name)
        except OSError as exc:
            raise EvaluationFailure(LOAD_ERROR, f"cannot load unit {shown}: {exc}") from exc
        version_fn = getattr(self.library, "kf_abi_version", None)
        if version_fn is None:
            raise EvaluationFailure(ABI_MISMATCH, f"unit {shown} exports no kf_abi_version()")
        version_fn.restype = ctypes.c_int
        version_fn.argtypes = []
        version = int(version_fn())
        if version != ABI_VERSION:
            raise EvaluationFailure(
                ABI_MISMATCH,
                f"unit {shown} was built against kf ABI {version}, executor speaks {ABI_VERSION}",
            )
        self._entries: dict[str, Any] = {}
        self.launches = 0

    def entry(self, name: str) -> Any:
        if name not in self._entries:
            try:
                raw = getattr(self.library, name)
            except AttributeError:
                raise EvaluationFailure(
                    MISSING_ENTRY_POINT, f"unit exports no entry point `{name}`"
                ) from None
            self._entries[name] = ENTRY_SIGNATURE(ctypes.cast(raw, ctypes.c_void_p).value)
        return self._entries[name]

    def set_threads(self, threads: int) -> None:
        """Pin the unit's OpenMP team size (the unit's libgomp is found through its dependencies)."""
        setter = getattr(self.library, "omp_set_num_threads", None)
        if setter is not None:
            setter.argtypes = [ctypes.c_int]
            setter(threads)

    def call(self, name: str, inputs: DescriptorArray, outputs: DescriptorArray, stream: int | None) -> None:
        """Call an entry point; a non-zero return is a kernel_error naming the code."""
        fn = self.entry(name)
        self.launches += 1
        code = fn(inputs.array, len(inputs), outputs.array, len(outputs), ctypes.c_void_p(stream or 0))
        if code != 0:
            known = {1: "KF_ERR_BAD_ARGUMENTS", 2: "KF_ERR_UNSUPPORTED", 3: "KF_ERR_LAUNCH"}.get(
                code, "unknown"
            )
            raise EvaluationFailure(KERNEL_ERROR, f"entry point `{name}` returned {code} ({known})")
