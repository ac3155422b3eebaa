"""torch.compile of a task's reference, compiled once per judge process, task source, shape and device.

Every evaluation loads the task's reference source as a fresh module (its own code objects), so a
`torch.compile` per evaluation traces and compiles again: on the H200 that took about 15 s of a 17 s
evaluation whose candidate needed well under one. The judge is long-lived and no candidate runs in it,
so the compiled callable is kept here and only re-timed by each evaluation, beside eager, on that
evaluation's own inputs. It holds the model instance of the evaluation that compiled it: parameters
drawn the same way (seed 0), and a compiled graph's speed does not depend on their values. Bounded
(least recently used first out); a failure to compile is remembered too, so it is not paid again.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

MAX_ENTRIES = 16


class CompileFailed(Exception):
    """torch.compile was tried for this key before and failed (the message says how)."""


_cache: OrderedDict[str, Any] = OrderedDict()


def cache_key(reference_source: str, overrides: Mapping[str, Any], device: str) -> str:
    shape = repr(sorted(overrides.items()))
    return hashlib.sha256("\0".join((reference_source, shape, device)).encode()).hexdigest()


def compiled_reference(key: str, compile_model: Callable[[], Any]) -> Any:
    """The compiled callable for `key`, made by `compile_model()` the first time (its first call, which
    triggers the compilation, is the caller's). Raises CompileFailed where that failed before."""
    if key in _cache:
        _cache.move_to_end(key)
        held = _cache[key]
        if isinstance(held, CompileFailed):
            raise held
        return held
    compiled = compile_model()
    remember(key, compiled)
    return compiled


def remember(key: str, value: Any) -> None:
    """Keep `value` (a compiled callable or a CompileFailed) for `key`; the oldest go beyond MAX_ENTRIES."""
    _cache[key] = value
    _cache.move_to_end(key)
    while len(_cache) > MAX_ENTRIES:
        _cache.popitem(last=False)


def clear() -> None:
    _cache.clear()
