"""Validating a task: run its reference in a child process and reject what cannot be optimised.

`validate_task(task)` starts `python -m kernelfoundry.tasks.validation_child` in its own session
with a deadline and a limit on its resident memory, polled by the parent (an address-space rlimit
would break CUDA, which reserves huge address ranges, and OpenBLAS on many-core hosts), so a
reference that hangs, crashes or eats memory costs one child, never the caller. For every shape the
child builds the model, runs forward() on two input seeds and records inputs, outputs, parameter
counts and the eager runtime; it rejects outputs that are not tensors and degenerate outputs
(NaN/Inf, near zero, near constant, unchanged when the inputs change). Failures raise TaskError:
import_error, missing_model, missing_get_inputs, bad_shape, reference_error, no_tensor_output,
degenerate_output, timeout, resource_limit. This module never executes user code in the calling
process and never unpickles what the child sends (JSON only).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kernelfoundry.tasks.model import Task, TaskError
from kernelfoundry.tasks.summary import TaskSummary

CHILD_MODULE = "kernelfoundry.tasks.validation_child"
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MEMORY_LIMIT_BYTES = 16 << 30
_OUTPUT_TAIL_CHARS = 2000
_WATCH_INTERVAL_S = 0.1


def validate_task(
    task: Task,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
    device: str = "cpu",
) -> TaskSummary:
    """Run the reference of every shape in a child; return what it learned or raise TaskError."""
    with tempfile.TemporaryDirectory(prefix="kf-validate-") as scratch:
        result_path = Path(scratch) / "result.jsonl"
        result_path.touch()
        task_path = Path(scratch) / "task.pickle"
        task_path.write_bytes(pickle.dumps(task))
        output_path = Path(scratch) / "output.txt"
        # stdin and output are files, not pipes: user code that forks a daemon holding a pipe open
        # cannot make us wait past the deadline.
        with task_path.open("rb") as stdin, output_path.open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", CHILD_MODULE, str(result_path), device],
                cwd=scratch,
                stdin=stdin,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                timed_out, over_memory = _watch(process, timeout_s, memory_limit_bytes)
            finally:
                _kill_group(process.pid)
                process.wait()
        tail = output_path.read_bytes()[-_OUTPUT_TAIL_CHARS:].decode("utf-8", errors="replace").strip()
        records = _records(result_path)
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
    for record in records:
        if "error" in record:
            raise TaskError(record["error"]["reason"], f"task `{task.name}`: {record['error']['message']}")
        if "summary" in record:
            return TaskSummary.from_dict(record["summary"])
    raise _died(task, process.returncode, last_step, tail, memory_limit_bytes)


def _watch(process: subprocess.Popen[bytes], timeout_s: float, rss_limit: int) -> tuple[bool, bool]:
    """Wait for the child until its deadline; (timed out, over the resident-memory limit)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            process.wait(timeout=min(_WATCH_INTERVAL_S, max(0.0, deadline - time.monotonic())))
            return False, False
        except subprocess.TimeoutExpired:
            pass
        if _resident_bytes(process.pid) > rss_limit:
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
    output = f"; its output ends with: {tail}" if tail else ""
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


def _records(path: Path) -> list[dict[str, Any]]:
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
