"""Validating a task: its reference runs in a sandboxed child on the run's device; refuse only the unusable.

`validate_task(task, device=...)` starts `python -m kernelfoundry.tasks.validation_child` (in
kernelfoundry.sandbox when that package is present: no network, no inherited secrets, scratch-only
writes; see `_spawn_child`) with a deadline and a limit on its resident memory, polled by the parent (an
address-space rlimit would break CUDA, which reserves huge address ranges, and OpenBLAS on many-core
hosts), so a reference that hangs, crashes or eats memory costs one child, never the caller. The child
validates on the run's target device (kernelfoundry.tasks.validation_child says how, and how memory is
estimated before anything is allocated) and answers in JSON lines of bounded size; this module never
executes user code in the calling process and never unpickles what the child sends.

A summary is cached on disk (`cache_dir`) under the hash of what decides it: the reference source, the
shapes, the tolerance, the device and the torch version; refusals are not cached (free memory changes).
The folder is bounded (`cache_bounds`, kernelfoundry.tasks.cache_bounds): least recently used summaries
leave first.

Failures raise TaskError: import_error, missing_model, missing_get_inputs, bad_shape, bad_inputs,
bad_init_inputs, reference_error, no_tensor_output, degenerate_output, timeout, resource_limit,
sandbox_unavailable (the sandbox refused to start the child: the task was not looked at).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kernelfoundry.stack.device_lease import DeviceLease
from kernelfoundry.tasks.cache_bounds import DEFAULT_BOUNDS, CacheBounds, prune, touch
from kernelfoundry.tasks.model import Task, TaskError
from kernelfoundry.tasks.summary import TaskSummary

CHILD_MODULE = "kernelfoundry.tasks.validation_child"
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MEMORY_LIMIT_BYTES = 16 << 30
MAX_RESULT_BYTES = 1 << 20  # the child's JSON lines: progress, then one summary or one error
CACHE_FORMAT = 1
_OUTPUT_TAIL_CHARS = 2000
_WATCH_INTERVAL_S = 0.1


def device_for_hardware(hardware: str) -> str:
    """The device a run on `hardware` (`cpu.x86_64`, `cuda.h200`, `cuda`) validates on: `cpu` or `cuda`."""
    return "cuda" if hardware.partition(".")[0] == "cuda" else "cpu"


def validate_task(
    task: Task,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
    device: str = "cpu",
    cache_dir: Path | None = None,
    cache_bounds: CacheBounds = DEFAULT_BOUNDS,
    device_lock_dir: str | Path | None = None,
) -> TaskSummary:
    """Run the reference of every shape in a child on `device`; return what it learned or raise TaskError.
    `device_lock_dir`: the host's GPU leases (kernelfoundry.stack.device_lease): a validation on a GPU
    waits for the evaluation in flight there to end, and holds new ones back, before its child starts."""
    key = cache_key(task, device)
    cached = _read_cache(cache_dir, key)
    if cached is not None:
        return cached
    with DeviceLease(device_lock_dir).validating(device):
        summary = _validate_in_child(task, timeout_s, memory_limit_bytes, device)
    _write_cache(cache_dir, key, summary, cache_bounds)
    return summary


def cache_key(task: Task, device: str) -> str:
    """The hash of everything a validation's outcome depends on."""
    import importlib.metadata

    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "none"
    decided_by = {
        "format": CACHE_FORMAT,
        "source": hashlib.sha256(task.reference_source.encode()).hexdigest(),
        "shapes": [
            [shape.name, sorted((k, repr(v)) for k, v in shape.overrides.items())] for shape in task.shapes
        ],
        "tolerance": [task.tolerance.atol, task.tolerance.rtol] if task.tolerance else None,
        "device": device,
        "torch": torch_version,
    }
    return hashlib.sha256(json.dumps(decided_by, sort_keys=True).encode()).hexdigest()[:32]


def _read_cache(cache_dir: Path | None, key: str) -> TaskSummary | None:
    if cache_dir is None:
        return None
    path = Path(cache_dir) / f"{key}.json"
    try:
        summary = TaskSummary.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent or unreadable: validate again and rewrite it
    touch(path)  # recently used: the last to leave when the folder is trimmed
    return summary


def _write_cache(cache_dir: Path | None, key: str, summary: TaskSummary, bounds: CacheBounds) -> None:
    if cache_dir is None:
        return
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs time
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        partial = Path(cache_dir) / f".{key}.{os.getpid()}.tmp"
        partial.write_text(json.dumps(summary.to_dict()), encoding="utf-8")
        written = Path(cache_dir) / f"{key}.json"
        partial.replace(written)
        prune(Path(cache_dir), bounds, keep=written)


@dataclass
class _Child:
    """The running child: its process and how to kill everything it started."""

    process: Any  # subprocess.Popen or kernelfoundry.sandbox.SandboxedProcess
    pid: int

    def wait(self, timeout: float | None = None) -> int:
        return int(self.process.wait(timeout=timeout))

    def kill_all(self) -> None:
        if hasattr(self.process, "kill_all"):
            self.process.kill_all()
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        self.process.wait()

    @property
    def returncode(self) -> int:
        return int(self.wait())


def _spawn_child(argv: list[str], scratch: Path, stdin: IO[bytes], output: IO[bytes], gpu: bool) -> _Child:
    """Start the child in its own session: in kernelfoundry.sandbox when present, else a plain subprocess.

    Memory is watched by the parent (resident bytes), so the sandbox's address-space limit is not used.
    """
    try:
        from kernelfoundry.sandbox import SandboxPolicy, spawn_sandboxed
    except ImportError:
        process = subprocess.Popen(
            argv, cwd=scratch, stdin=stdin, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
        return _Child(process, process.pid)
    from kernelfoundry.sandbox import SandboxError

    policy = SandboxPolicy.for_python(scratch, gpu=gpu, max_open_files=1024)
    try:
        sandboxed = spawn_sandboxed(argv, policy, stdin=stdin, stdout=output, stderr=subprocess.STDOUT)
    except SandboxError as exc:
        raise TaskError(
            "sandbox_unavailable", f"the validation child could not be started in its sandbox: {exc}"
        ) from exc
    return _Child(sandboxed, sandboxed.pid)


def _validate_in_child(task: Task, timeout_s: float, memory_limit_bytes: int, device: str) -> TaskSummary:
    with tempfile.TemporaryDirectory(prefix="kf-validate-") as folder:
        scratch = Path(folder)
        result_path = scratch / "result.jsonl"
        result_path.touch()
        task_path = scratch / "task.pickle"
        task_path.write_bytes(pickle.dumps(task))  # parent to child only: the parent is trusted
        output_path = scratch / "output.txt"
        argv = [sys.executable, "-m", CHILD_MODULE, str(result_path), device, str(memory_limit_bytes)]
        # stdin and output are files, not pipes: user code that forks a daemon holding a pipe open
        # cannot make us wait past the deadline.
        with task_path.open("rb") as stdin, output_path.open("wb") as output:
            child = _spawn_child(argv, scratch, stdin, output, gpu=device.startswith("cuda"))
            try:
                timed_out, over_memory = _watch(child, timeout_s, memory_limit_bytes)
            finally:
                child.kill_all()
        returncode = child.returncode
        tail = output_path.read_bytes()[-_OUTPUT_TAIL_CHARS:].decode("utf-8", errors="replace").strip()
        records, oversized = _records(result_path)
    last_step = next((r["progress"] for r in reversed(records) if "progress" in r), "starting")
    if over_memory:
        raise TaskError(
            "resource_limit",
            f"task `{task.name}`: the reference used more than {memory_limit_bytes >> 20} MiB of host memory "
            f"({last_step})",
        )
    if timed_out:
        raise TaskError(
            "timeout",
            f"task `{task.name}`: the reference did not finish within {timeout_s:g} s ({last_step})",
        )
    if oversized:
        raise TaskError(
            "reference_error",
            f"task `{task.name}`: the validation child wrote more than {MAX_RESULT_BYTES} bytes of results "
            f"({last_step}); its answer is not read",
        )
    for record in records:
        if "error" in record:
            raise TaskError(record["error"]["reason"], f"task `{task.name}`: {record['error']['message']}")
        if "summary" in record:
            return TaskSummary.from_dict(record["summary"])
    raise _died(task, returncode, last_step, tail, memory_limit_bytes)


def _watch(child: _Child, timeout_s: float, rss_limit: int) -> tuple[bool, bool]:
    """Wait for the child until its deadline; (timed out, over the resident-memory limit)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            child.wait(timeout=min(_WATCH_INTERVAL_S, max(0.0, deadline - time.monotonic())))
            return False, False
        except subprocess.TimeoutExpired:
            pass
        if _resident_bytes(child.pid) > rss_limit:
            return False, True
        if time.monotonic() >= deadline:
            return True, False


def _resident_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _died(task: Task, returncode: int, last_step: str, tail: str, memory_limit_bytes: int) -> TaskError:
    how = f"exit status {returncode}"
    if returncode < 0:
        how = f"signal {_signal_name(-returncode)}"
    # the exception's own line first: callers cap long messages, and the traceback before it is long
    last = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
    output = f": {last}; its output ends with: {tail}" if tail else ""
    if returncode == -signal.SIGKILL:
        return TaskError(
            "resource_limit",
            f"task `{task.name}`: the reference process was killed ({how}) during {last_step}, most likely "
            f"for memory (limit {memory_limit_bytes >> 20} MiB){output}",
        )
    return TaskError(
        "reference_error",
        f"task `{task.name}`: the reference process died ({how}) during {last_step}{output}",
    )


def _records(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """The child's JSON records, and whether it wrote more than MAX_RESULT_BYTES (then none are read)."""
    if path.stat().st_size > MAX_RESULT_BYTES:
        return [], True
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records, False


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
