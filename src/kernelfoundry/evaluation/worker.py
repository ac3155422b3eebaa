"""EvaluationWorker: owns one device and evaluates requests through a judge process.

The judge (judge.py, trusted) is kept between evaluations (torch and the device context stay warm) and
spawns a fresh sandboxed runner (runner.py, untrusted) for every candidate, so a candidate's crash or
hang costs only its runner. The judge itself is replaced after a worker error, a broken device context,
a crash or a hang of its own. The worker enforces an outer deadline (the request's plus JUDGE_MARGIN_S)
in case the judge itself stops answering. Requests and reports cross as JSON, never pickle. Neither
the worker nor the judge ever loads a unit. Synchronous; a lock serialises callers.

The judge runs the task's reference source (client code) for the answer and the baselines, so it is
sandboxed too (kernelfoundry.sandbox): an allow-listed environment (JUDGE_ENV_ALLOW: never a service's
credentials), its own network namespace, writes confined to its scratch folder (where its runners' own
scratch folders live) and the `writable` folders the worker is given (the host's timing lock), its
whole process tree killed with it. It has no memory limit (float64 references of large tasks) and no
file-size limit (its input memfds can pass 1 GiB).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import kernelfoundry
from kernelfoundry.evaluation import reasons
from kernelfoundry.evaluation.protocol import ChildGone, DeadlinePassed, read_message, write_message
from kernelfoundry.evaluation.report import EvaluationReport
from kernelfoundry.evaluation.settings import EvaluationRequest
from kernelfoundry.evaluation.wire import request_to_dict
from kernelfoundry.sandbox.policy import PYTHON_ENV_ALLOW
from kernelfoundry.stack.device_lease import DeviceLease

STARTUP_TIMEOUT_S = 180.0
# The judge enforces the request's deadline on the runner; this margin covers its own work after that
# (and a runner's start when no idle one was ready).
JUDGE_MARGIN_S = 120.0
STDERR_TAIL_BYTES = 2000
# A fresh judge every so often bounds what accumulates (caches of torch.compile, allocator pools).
MAX_EVALUATIONS_PER_CHILD = 50


# What the judge takes from the worker's environment: a Python worker's (torch, OpenMP, CUDA), plus the
# CUDA toolkit's location. PYTHONPATH and the settings below are set by judge_environment.
JUDGE_ENV_ALLOW: tuple[str, ...] = (*PYTHON_ENV_ALLOW, "CUDA_HOME", "TORCH_CUDA_ARCH_LIST")
# The judge's own settings: the runner's memory limit (runner_client.py), the input sets' memory
# budget (set_plan.py) and the trial cache's size (trial_cache.py). Named one by one: the sandbox never
# passes KF_* variables by pattern (secrets).
JUDGE_SETTINGS: tuple[str, ...] = (
    "KF_RUNNER_MEMORY_BYTES",
    "KF_EVALUATION_SETS_MEMORY_BYTES",
    "KF_EVALUATION_TRIAL_CACHE_BYTES",
)


def judge_environment(cpu_threads: int | None) -> dict[str, str]:
    """What the judge gets on top of JUDGE_ENV_ALLOW: where to import from, and its thread settings."""
    chosen: dict[str, str] = {name: os.environ[name] for name in JUDGE_SETTINGS if name in os.environ}
    if cpu_threads:
        chosen["OMP_NUM_THREADS"] = str(cpu_threads)
    # The unit shares torch's OpenMP runtime; with spinning waits, one descheduled team member on a
    # busy host stretches a microsecond region to a scheduler tick. Passive waits cost both the
    # candidate and eager the same small wake-up, and keep timings stable on shared machines.
    chosen["OMP_WAIT_POLICY"] = os.environ.get("OMP_WAIT_POLICY", "PASSIVE")
    package_root = str(Path(kernelfoundry.__file__).resolve().parents[1])
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    chosen["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([package_root, *inherited]))
    return chosen


class _Child:
    """One running judge process (sandboxed) and its pipes."""

    def __init__(self, device: str, cpu_threads: int | None, writable: tuple[Path, ...] = ()) -> None:
        from kernelfoundry.sandbox import SandboxPolicy, spawn_sandboxed

        args = [sys.executable, "-m", "kernelfoundry.evaluation.judge", "--device", device]
        if threading.current_thread() is threading.main_thread():
            args.append("--pdeathsig")
        self.scratch = Path(tempfile.mkdtemp(prefix="kf-judge-"))
        self.stderr: IO[bytes] = tempfile.TemporaryFile(prefix="kf-eval-child-")  # noqa: SIM115 - lives with the child
        policy = SandboxPolicy.for_python(
            self.scratch,
            env_allow=JUDGE_ENV_ALLOW,
            env_set=judge_environment(cpu_threads),
            gpu=device.startswith("cuda"),
            max_open_files=4096,
            file_bytes=None,
            # /proc: each runner's launcher maps its own nested user namespace (/proc/self/uid_map),
            # which Landlock would refuse as a write outside the scratch folder.
            writable=(Path("/proc"), *(w for w in writable if Path(w).exists())),
        )
        try:
            self.sandboxed: Any = spawn_sandboxed(
                args, policy, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr
            )
        except Exception:
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        self.process = self.sandboxed.popen
        assert self.process.stdin is not None and self.process.stdout is not None
        self.to_child = self.process.stdin.fileno()
        self.from_child = self.process.stdout.fileno()
        try:
            hello = read_message(self.from_child, time.monotonic() + STARTUP_TIMEOUT_S)
            if not hello.get("ready"):
                raise RuntimeError(f"unexpected greeting {hello!r}")
            self.protections: list[str] = [
                *hello.get("protections", []),
                *(f"sandbox: {p}" for p in self.sandboxed.protections),
            ]
        except Exception as exc:
            tail = self.stderr_tail()
            self.kill()
            raise RuntimeError(
                f"evaluation judge did not start ({type(exc).__name__}): {tail[-500:]}"
            ) from exc

    def stderr_tail(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            self.stderr.seek(0, os.SEEK_END)
            size = self.stderr.tell()
            self.stderr.seek(max(0, size - STDERR_TAIL_BYTES))
            return self.stderr.read().decode("utf-8", "replace").strip()
        return ""

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.sandboxed.kill_all()  # the judge and everything it started (runners included)
        if self.process.poll() is None:
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=30)
        for stream in (self.process.stdin, self.process.stdout, self.stderr):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def close(self) -> None:
        """Ask politely (EOF on stdin), then kill."""
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        self.kill()


class EvaluationWorker:
    """Evaluates requests for one device ("cpu" or "cuda:N"), one at a time, crash-isolated."""

    def __init__(
        self,
        device: str = "cpu",
        cpu_threads: int | None = None,
        max_evaluations_per_child: int = MAX_EVALUATIONS_PER_CHILD,
        writable: tuple[Path, ...] = (),
        lease: DeviceLease | None = None,
    ) -> None:
        """`writable`: folders the sandboxed judge may write besides its scratch (the timing lock's).
        `lease`: the host's GPU leases; each evaluation holds its device's (a validation beside it waits
        for its end), the wait for one not counted in the request's deadline."""
        self.device = device
        self.lease = lease or DeviceLease(None)
        self.writable = tuple(Path(w) for w in writable)
        self.cpu_threads = cpu_threads
        self.max_evaluations_per_child = max_evaluations_per_child
        self._served = 0
        self._child: _Child | None = None
        self._lock = threading.Lock()
        self.children_started = 0

    @property
    def child_pid(self) -> int | None:
        """The judge process's pid (None before the first evaluation or after a retirement)."""
        return self._child.process.pid if self._child is not None else None

    @property
    def judge_protections(self) -> list[str]:
        """What the judge hardened itself with (e.g. "not dumpable", "child subreaper")."""
        return list(self._child.protections) if self._child is not None else []

    def _ensure_child(self) -> _Child:
        if self._child is None or self._child.process.poll() is not None:
            if self._child is not None:
                self._child.kill()
            self._child = _Child(self.device, self.cpu_threads, self.writable)
            self.children_started += 1
            self._served = 0
        return self._child

    def _discard_child(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child = None

    def evaluate(self, request: EvaluationRequest) -> EvaluationReport:
        if request.device != self.device:
            return EvaluationReport.failure(
                reasons.BAD_REQUEST, f"request for {request.device} sent to the worker of {self.device}"
            )
        with self._lock:
            started = time.monotonic()
            self._allow_timing_lock(request.settings.timing_lock_dir)
            try:
                child = self._ensure_child()
            except Exception as exc:  # the child could not start: a worker problem, not the candidate's
                self._discard_child()
                return EvaluationReport.failure(
                    reasons.WORKER_ERROR, f"evaluation process failed to start: {exc}", device=self.device
                )
            # The deadline covers the evaluation, not the start of a fresh process (torch, CUDA context)
            # nor the wait for a validation on the device to end.
            with self.lease.evaluating(self.device):
                report = self._exchange(child, request, time.monotonic())
            report.duration_s = time.monotonic() - started
            return report

    def _allow_timing_lock(self, folder: str) -> None:
        """A request's host timing lock must be writable by the sandboxed judge: a folder it could not
        write before gets a judge started anew with it (a service names one folder, so this happens once)."""
        if not folder:
            return
        path = Path(folder)
        if path in self.writable:
            return
        path.mkdir(parents=True, exist_ok=True)
        self.writable = (*self.writable, path)
        self._discard_child()

    def _exchange(self, child: _Child, request: EvaluationRequest, started: float) -> EvaluationReport:
        deadline_s = request.settings.deadline_s
        # with a timing lock the judge may also wait up to the deadline for it (engine.py, timing_wait)
        allowed_s = 2 * deadline_s if request.settings.timing_lock_dir else deadline_s
        try:
            write_message(child.to_child, request_to_dict(request))
            answer: dict[str, Any] = read_message(child.from_child, started + allowed_s + JUDGE_MARGIN_S)
        except DeadlinePassed:
            self._discard_child()
            return EvaluationReport.failure(
                reasons.TIMEOUT,
                f"the judge did not answer within {allowed_s:g} s (its deadline, and any wait for the "
                f"timing lock) plus {JUDGE_MARGIN_S:g} s; the evaluation process was killed",
                device=self.device,
            )
        except (ChildGone, EOFError, OSError):
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(timeout=10)
            cause = reasons.signal_name(child.process.poll())
            tail = child.stderr_tail()
            self._discard_child()
            message = f"the judge process died with {cause} while judging the candidate"
            if tail:
                message += f"; its last output: {tail[-500:]}"
            return EvaluationReport.failure(reasons.CRASH, message, device=self.device)
        report = EvaluationReport.from_dict(answer["report"])
        self._served += 1
        if answer.get("recycle") or self._served >= self.max_evaluations_per_child:
            self._discard_child()
        return report

    def close(self) -> None:
        with self._lock:
            if self._child is not None:
                self._child.close()
                self._child = None

    def __enter__(self) -> EvaluationWorker:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def evaluate_once(request: EvaluationRequest) -> EvaluationReport:
    """Evaluate in a fresh child process that is closed afterwards."""
    with EvaluationWorker(request.device, request.settings.cpu_threads) as worker:
        return worker.evaluate(request)
