"""EvaluationWorker: owns one device and evaluates requests through a judge process.

The judge (judge.py, trusted) is kept between evaluations (torch and the device context stay warm) and
spawns a fresh sandboxed runner (runner.py, untrusted) for every candidate, so a candidate's crash or
hang costs only its runner. The judge itself is replaced after a worker error, a broken device context,
a crash or a hang of its own. The worker enforces an outer deadline (the request's plus JUDGE_MARGIN_S)
in case the judge itself stops answering. Requests and reports cross as JSON, never pickle. Neither
the worker nor the judge ever loads a unit. Synchronous; a lock serialises callers.
"""

from __future__ import annotations

import contextlib
import os
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

STARTUP_TIMEOUT_S = 180.0
# The judge enforces the request's deadline on the runner; this margin covers its own work after that
# (and a runner's start when no idle one was ready).
JUDGE_MARGIN_S = 120.0
STDERR_TAIL_BYTES = 2000
# A fresh judge every so often bounds what accumulates (caches of torch.compile, allocator pools).
MAX_EVALUATIONS_PER_CHILD = 50


class _Child:
    """One running child process and its pipes."""

    def __init__(self, device: str, cpu_threads: int | None) -> None:
        env = dict(os.environ)
        if cpu_threads:
            env["OMP_NUM_THREADS"] = str(cpu_threads)
        # The unit shares torch's OpenMP runtime; with spinning waits, one descheduled team member on a
        # busy host stretches a microsecond region to a scheduler tick. Passive waits cost both the
        # candidate and eager the same small wake-up, and keep timings stable on shared machines.
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        package_root = str(Path(kernelfoundry.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        args = [sys.executable, "-m", "kernelfoundry.evaluation.judge", "--device", device]
        if threading.current_thread() is threading.main_thread():
            args.append("--pdeathsig")
        self.stderr: IO[bytes] = tempfile.TemporaryFile(prefix="kf-eval-child-")  # noqa: SIM115 - lives with the child
        self.process = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env, close_fds=True
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.to_child = self.process.stdin.fileno()
        self.from_child = self.process.stdout.fileno()
        try:
            hello = read_message(self.from_child, time.monotonic() + STARTUP_TIMEOUT_S)
            if not hello.get("ready"):
                raise RuntimeError(f"unexpected greeting {hello!r}")
            self.protections: list[str] = list(hello.get("protections", []))
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
        if self.process.poll() is None:
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=30)
        for stream in (self.process.stdin, self.process.stdout, self.stderr):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()

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
    ) -> None:
        self.device = device
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
            self._child = _Child(self.device, self.cpu_threads)
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
            try:
                child = self._ensure_child()
            except Exception as exc:  # the child could not start: a worker problem, not the candidate's
                self._discard_child()
                return EvaluationReport.failure(
                    reasons.WORKER_ERROR, f"evaluation process failed to start: {exc}", device=self.device
                )
            # The deadline covers the evaluation, not the start of a fresh process (torch, CUDA context).
            report = self._exchange(child, request, time.monotonic())
            report.duration_s = time.monotonic() - started
            return report

    def _exchange(self, child: _Child, request: EvaluationRequest, started: float) -> EvaluationReport:
        deadline_s = request.settings.deadline_s
        try:
            write_message(child.to_child, request_to_dict(request))
            answer: dict[str, Any] = read_message(child.from_child, started + deadline_s + JUDGE_MARGIN_S)
        except DeadlinePassed:
            self._discard_child()
            return EvaluationReport.failure(
                reasons.TIMEOUT,
                f"the judge did not answer within the deadline of {deadline_s:g} s plus "
                f"{JUDGE_MARGIN_S:g} s; the evaluation process was killed",
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
