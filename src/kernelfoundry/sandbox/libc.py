"""The C library through ctypes, loaded once without ctypes.util.find_library (which runs ldconfig or gcc)."""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def libc() -> ctypes.CDLL:
    """The process's own C library (already loaded by the interpreter), with errno captured."""
    return ctypes.CDLL(None, use_errno=True)
