"""The trial sets' reference outputs, kept by the judge across the candidates of a task.

A candidate's five correctness trials each need the high-precision reference of a fresh input set: on
KernelBench's level-2 convolutions the float64 forwards were 35-40% of the executor's time, computed again
for every candidate of the same task. Per (task, shape, device) the judge now keeps secret trial seeds:
the model's weights and the trial input sets are drawn from them, so every candidate of the task is tried
on the same values, and each set's reference is computed once and kept here (a host copy). What this
spares is the reference only: each candidate is still tried on every trial set, and its timed calls run
on fresh seeds and are checked there, so a unit that learnt the trial sets' answers gains nothing.

A kept reference is used only when the values drawn now have the fingerprint they had when it was
computed, and the model's parameters theirs (a task whose `get_inputs()` or `__init__` draws outside
torch's generator gives other values for the same seed: computed afresh, the entry dropped). At most
`capacity` bytes of references are kept (`KF_EVALUATION_TRIAL_CACHE_BYTES`; by default an eighth of
the host's memory, within 2 and 16 GiB; 0 keeps none); a set larger than that is never kept. Room is made
by dropping the least recently used task, but only one idle for `idle_s` (two minutes): several tasks
evaluated at once whose references do not all fit would otherwise drop each other's before their next
candidate and nothing kept would ever be used (on the H200, four level-2 tasks at once with 2 GB
references: the re-timings of their best kernels reused none). A reference that finds no room is not
kept; the tasks that got theirs in keep them.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kernelfoundry.stack.hardware import physical_memory_bytes

MIN_DEFAULT_CAPACITY = 2 << 30
MAX_DEFAULT_CAPACITY = 16 << 30
IDLE_S = 120.0  # a task unused this long may be dropped to make room for another's references


def default_capacity() -> int:
    """An eighth of the host's physical memory, within 2 and 16 GiB (the runner may take three quarters)."""
    return min(max(physical_memory_bytes() // 8, MIN_DEFAULT_CAPACITY), MAX_DEFAULT_CAPACITY)


Fingerprint = tuple[tuple[str, tuple[int, ...], float, float], ...]


def fingerprint(values: list[Any]) -> Fingerprint:
    """Dtype, shape and two float64 sums (all elements; every 7th from the second) of each tensor:
    equal for the same draw, different for another draw of random values."""
    import torch

    prints = []
    for value in values:
        if not isinstance(value, torch.Tensor):
            prints.append((repr(value), (), 0.0, 0.0))
            continue
        flat = value.detach().reshape(-1)
        wide = torch.float64 if value.is_floating_point() else torch.int64
        whole = float(torch.sum(flat, dtype=wide).item()) if flat.numel() else 0.0
        strided = float(torch.sum(flat[1::7], dtype=wide).item()) if flat.numel() > 1 else 0.0
        prints.append((str(value.dtype), tuple(value.shape), whole, strided))
    return tuple(prints)


def task_key(reference_source: str, shape_name: str, overrides: Any, device: str) -> str:
    """The key of a task's entry: its source, its shape variant and the device the judge runs."""
    text = f"{reference_source}\0{shape_name}\0{sorted(dict(overrides).items())!r}\0{device}"
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class TaskTrials:
    seeds: list[int]  # the model's seed first; trial k draws its set from seeds[k]
    parameters: Fingerprint  # of the model drawn from seeds[0]
    references: dict[int, tuple[Fingerprint, list[Any]]] = field(default_factory=dict)  # seed ->
    size: int = 0  # bytes of the kept references
    used: float = 0.0  # when it was last used (the cache's clock)


class TrialCache:
    """Trial seeds and kept references per task key (see the module docstring)."""

    def __init__(
        self,
        capacity: int | None = None,
        idle_s: float = IDLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity is None:
            configured = os.environ.get("KF_EVALUATION_TRIAL_CACHE_BYTES", "")
            try:
                capacity = int(configured) if configured else default_capacity()
            except ValueError:
                raise ValueError(
                    f"KF_EVALUATION_TRIAL_CACHE_BYTES must be a number of bytes, got {configured!r}"
                ) from None
        self.capacity = max(0, capacity)
        self.idle_s = idle_s
        self.clock = clock
        self.tasks: OrderedDict[str, TaskTrials] = OrderedDict()

    def _touch(self, key: str) -> None:
        self.tasks[key].used = self.clock()
        self.tasks.move_to_end(key)

    @property
    def size(self) -> int:
        return sum(t.size for t in self.tasks.values())

    def seeds(self, key: str) -> list[int] | None:
        """The task's trial seeds, or None for a task not seen (or dropped)."""
        entry = self.tasks.get(key)
        if entry is None:
            return None
        self._touch(key)
        return list(entry.seeds)

    def start(self, key: str, seeds: list[int], parameters: Fingerprint) -> None:
        """A new entry (replacing any): the seeds this evaluation draws its trial sets from."""
        self.tasks[key] = TaskTrials(list(seeds), parameters)
        self._touch(key)

    def parameters_match(self, key: str, parameters: Fingerprint) -> bool:
        entry = self.tasks.get(key)
        return entry is not None and entry.parameters == parameters

    def drop(self, key: str) -> None:
        self.tasks.pop(key, None)

    def reference(self, key: str, seed: int, values: Fingerprint) -> list[Any] | None:
        """The kept reference of trial seed `seed`, if the values drawn now are the ones it answers."""
        entry = self.tasks.get(key)
        if entry is None or seed not in entry.references:
            return None
        kept_values, reference = entry.references[seed]
        if kept_values != values:
            self.drop(key)  # the task draws other values for the same seed: nothing here is reusable
            return None
        self._touch(key)
        return reference

    def keep(self, key: str, seed: int, values: Fingerprint, reference: list[Any]) -> bool:
        """Keep a host copy of trial seed `seed`'s reference; False where it does not fit."""
        import torch

        entry = self.tasks.get(key)
        if entry is None or seed not in entry.seeds or seed in entry.references:
            return False
        size = sum(r.numel() * r.element_size() for r in reference if isinstance(r, torch.Tensor))
        if size > self.capacity:
            return False
        while self.size + size > self.capacity:
            now = self.clock()
            idle = [k for k, t in self.tasks.items() if k != key and now - t.used >= self.idle_s]
            if not idle:  # the others are in use: theirs stay, this one is not kept
                return False
            self.drop(idle[0])  # least recently used first
        host = [r.detach().to("cpu", copy=True) if isinstance(r, torch.Tensor) else r for r in reference]
        entry.references[seed] = (values, host)
        entry.size += size
        self._touch(key)
        return True
