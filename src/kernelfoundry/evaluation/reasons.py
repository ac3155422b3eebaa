"""Reason codes of a failed evaluation, and the error that carries one out of the evaluation steps.

Users count and filter failures by these codes; they are part of the product's contract (the
`reason` field of EvaluationReport and of the EvaluationFinished event). Never rename one.
"""

from __future__ import annotations

import contextlib
import signal

# The unit and its call.
ABI_MISMATCH = "abi_mismatch"
MISSING_ENTRY_POINT = "missing_entry_point"
LOAD_ERROR = "load_error"
KERNEL_ERROR = "kernel_error"
CRASH = "crash"
TIMEOUT = "timeout"
ILLEGAL_ADDRESS = "illegal_address"
DEVICE_ERROR = "device_error"
# Correctness.
WRONG_RESULT = "wrong_result"
WRONG_SHAPE = "wrong_shape"
WRONG_DTYPE = "wrong_dtype"
OUTPUT_NOT_WRITTEN = "output_not_written"
STALE_OUTPUT = "stale_output"
CACHED_RESULT = "cached_result"
INPUT_MODIFIED = "input_modified"
ASYNC_SIDE_STREAM = "async_side_stream"
CORRECT_ONLY_FIRST_SEED = "correct_only_first_seed"
CORRECT_ONLY_FIRST_SHAPE = "correct_only_first_shape"
DEGENERATE_OUTPUT = "degenerate_output"
PRECISION_DOWNGRADE = "precision_downgrade"
# Static checks of the Python glue.
GLUE_SYNTAX_ERROR = "glue_syntax_error"
GLUE_MISSING_MODEL_NEW = "glue_missing_model_new"
GLUE_REFERENCE_FALLBACK = "glue_reference_fallback"
GLUE_TRY_EXCEPT = "glue_try_except"
GLUE_TIMER_PATCHING = "glue_timer_patching"
GLUE_THREADS = "glue_threads"
GLUE_LAZY_TENSOR = "glue_lazy_tensor"
GLUE_IO = "glue_io"
GLUE_DYNAMIC_CODE = "glue_dynamic_code"
GLUE_NO_KERNEL_LAUNCH = "glue_no_kernel_launch"
GLUE_ERROR = "glue_error"
# The sealed runner and what the judge observes of it.
RUNNER_PROTOCOL_VIOLATION = "runner_protocol_violation"
TIMING_FORGED = "timing_forged"
TIMING_MISMATCH = "timing_mismatch"
TIMED_RUN_WRONG = "timed_run_wrong"
BACKGROUND_WORK = "background_work"
BACKGROUND_PROCESS = "background_process"
# The task or the request itself.
REFERENCE_ERROR = "reference_error"
BAD_REQUEST = "bad_request"
WORKER_ERROR = "worker_error"
# The judge's own allocation failed (references, eager, input sets): memory other processes held, no
# verdict on the candidate; the executor delivers the request again later (services/executor/handlers.py).
JUDGE_OUT_OF_MEMORY = "judge_out_of_memory"
# The runner ran out of device memory placing a shape's buffers, before the candidate's code ran: memory
# other processes held; delivered again later like judge_out_of_memory, the verdict after the last try.
RUNNER_OUT_OF_MEMORY = "runner_out_of_memory"
# Failures the executor delivers again later (services/executor/handlers.py): no verdict on the candidate
# until the last delivery.
MEMORY_REASONS = frozenset({JUDGE_OUT_OF_MEMORY, RUNNER_OUT_OF_MEMORY})

# Failures after which the judge process must not serve another evaluation (its own state may be
# wrong). A candidate's crash, hang or device error happens in its runner, which is discarded after
# every candidate anyway; the judge also retires itself when its own device context fails its check.
# A judge out of memory retires too: a fresh one gives back everything its allocator cached.
RECYCLING_REASONS = frozenset({WORKER_ERROR, JUDGE_OUT_OF_MEMORY})
# The judge's failures whose cause may be an allocation of its own (judge_out_of_memory when it was).
_JUDGE_SIDE_REASONS = frozenset({WORKER_ERROR, REFERENCE_ERROR})
_OUT_OF_MEMORY_TEXTS = ("out of memory", "can't allocate memory")


class EvaluationFailure(Exception):
    """Raised inside the evaluation steps; becomes a failed EvaluationReport with this reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


def classify_exception(exc: BaseException, where: str) -> EvaluationFailure:
    """A device error's text picks its reason; anything else raised by candidate code is a glue error,
    its message naming the line that raised it: the candidate's glue, torch, or the evaluator's own code
    (a NameError of the runner's once failed every CUDA candidate as "the candidate raised NameError")."""
    if isinstance(exc, EvaluationFailure):
        return exc
    text = f"{type(exc).__name__}: {exc}"
    lowered = text.lower()
    if "illegal memory access" in lowered or "illegal address" in lowered or "misaligned address" in lowered:
        return EvaluationFailure(ILLEGAL_ADDRESS, f"{where}: {text}")
    if "cuda error" in lowered or "acceleratorerror" in lowered or "cudaerror" in lowered:
        return EvaluationFailure(DEVICE_ERROR, f"{where}: {text}")
    at = raised_at(exc)
    return EvaluationFailure(GLUE_ERROR, f"{where} raised {text}" + (f" (at {at})" if at else ""))


def raised_at(exc: BaseException) -> str:
    """Where `exc` was raised: the innermost frame of its traceback as `path:line in function`, the path
    from its package on (kernelfoundry/..., torch/...) or the file's name; "" without a traceback."""
    tb = exc.__traceback__
    if tb is None:
        return ""
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    parts = code.co_filename.replace("\\", "/").split("/")
    packages = [i for i, part in enumerate(parts[:-1]) if part in ("kernelfoundry", "torch")]
    package = packages[-1] if packages else len(parts) - 1
    return f"{'/'.join(parts[package:])}:{tb.tb_lineno} in {code.co_name}"


def is_out_of_memory(exc: BaseException | None) -> bool:
    """`exc`, or an exception it was raised from, is a failed allocation: MemoryError, torch's
    OutOfMemoryError, or a RuntimeError that says so (torch's CPU allocator)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
            return True
        if isinstance(exc, RuntimeError) and any(t in str(exc).lower() for t in _OUT_OF_MEMORY_TEXTS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def judge_failure(failure: EvaluationFailure) -> EvaluationFailure:
    """A failure of the judge's own work (worker_error, reference_error) that an allocation caused
    becomes judge_out_of_memory; any other failure is returned as it is."""
    if failure.reason in _JUDGE_SIDE_REASONS and is_out_of_memory(failure.__cause__ or failure.__context__):
        out = EvaluationFailure(JUDGE_OUT_OF_MEMORY, f"the judge ran out of memory: {failure.message}")
        out.__cause__ = failure
        return out
    return failure


def signal_name(returncode: int | None) -> str:
    """How a process ended, for a message: the signal's name, or its exit status."""
    if returncode is None:
        return "an unknown cause"
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-returncode).name
        return f"signal {-returncode}"
    return f"exit status {returncode}"
