"""Whether CUDA IPC works between the judge and a process sealed like the runner, in both directions.

A staged device's outputs reach the judge through page-locked host memory today: two copies over the
host link per checked call (about 0.36 s for a 6.4 GB output on the H200: most of a level-1
evaluation's checks). With CUDA IPC the judge would map the runner's output memory (or the runner the
judge's) and copy inside the device. Whether the driver allows it across the sandbox's namespaces and
Landlock rules is a property of the host, so it is probed, as sandbox/gpu_probe.py probes CUDA's start-up:

- `runner_to_judge`: the sandboxed process allocates and fills a buffer, exports it
  (cuIpcGetMemHandle); the judge opens it (cuIpcOpenMemHandle) and reads the values back;
- `judge_to_runner`: the judge exports a buffer; the sandboxed process opens it and writes into it.

Legacy IPC handles name the exporting process; the H200 host refused them across the sandbox both ways
(cuIpcOpenMemHandle: CUDA_ERROR_INVALID_VALUE, bench/results/h200_2026-12-04). So a second method is
probed, `shareable_fd`: the judge creates memory with the virtual memory management API
(cuMemCreate, exportable as a POSIX file descriptor), passes the descriptor as it passes the channel
and the memfd arenas, and the sandboxed process imports and maps it:

- `writes`: the runner's read-write mapping wrote values the judge then reads (an output fetch);
- `read_only_refused`: a second mapping of the same memory made read-only (CU_MEM_ACCESS_FLAGS_PROT_READ)
  refused the runner's write, so inputs could be lent like the sealed memfd arenas.

    python -m kernelfoundry.evaluation.ipc_probe      # one JSON line; exit 0 when a method works

Driver API through ctypes in both processes (torch only makes the primary context current and wraps
the mapped pointers). The evaluation lends outputs this way where the host allows it (device_share.py).
"""

from __future__ import annotations

import ctypes
import json
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ELEMENTS = 1 << 20  # 4 MiB of float32
PROBE_TIMEOUT_S = 120.0
_LAZY_ENABLE_PEER_ACCESS = 1

# The sandboxed side: opens the judge's buffer and writes 7.0 into it, exports a buffer of its own
# holding 3.0, reports, and keeps its memory alive until the judge says it is done.
_CHILD = r"""
import ctypes, json, sys
import torch
from kernelfoundry.evaluation.ipc_probe import driver, export, open_handle, wrap
out = {}
try:
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    cuda = driver()
    request = json.loads(sys.stdin.readline())
    rc, pointer = open_handle(cuda, bytes.fromhex(request["handle"]))
    out["open_rc"] = rc
    if rc == 0:
        wrap(pointer + int(request["offset"]), int(request["elements"])).fill_(7.0)
        torch.cuda.synchronize()
    mine = torch.full((int(request["elements"]),), 3.0, device="cuda")
    torch.cuda.synchronize()
    rc, handle, offset = export(cuda, mine.data_ptr())
    out.update(export_rc=rc, handle=handle.hex(), offset=offset)
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out), flush=True)
sys.stdin.readline()
"""


# The shareable-fd method's sandboxed side: imports the judge's descriptor, maps it read-write and
# writes 7.0, then maps it again read-only and tries to write 9.0 (which a read-only mapping refuses).
_FD_CHILD = r"""
import json, sys
import torch
from kernelfoundry.evaluation.device_share import PROT_READ, BorrowedMemory, driver, map_shared, view
out = {}
try:
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    request = json.loads(sys.stdin.readline())
    size, device = int(request["size"]), torch.cuda.current_device()
    borrowed = BorrowedMemory.open(int(request["fd"]), size, device)
    out["borrowed"] = True
    view(borrowed.address, size).view(torch.float32).fill_(7.0)
    torch.cuda.synchronize()
    out["wrote"] = True
    read_only = map_shared(driver(), borrowed.handle, size, device, PROT_READ)
    out["read_only_mapped"] = True
    # the judge has the first answer even if the next write kills this process
    print(json.dumps(out), flush=True)
    sys.stdin.readline()
    try:
        view(read_only, size).view(torch.float32).fill_(9.0)
        torch.cuda.synchronize()
        out["read_only_write"] = "completed"
    except Exception as exc:
        out["read_only_write"] = f"refused: {type(exc).__name__}: {str(exc)[:160]}"
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out), flush=True)
"""


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


def driver() -> Any:
    """libcuda with the signatures of the legacy IPC calls (the _v2 entry points where it has them)."""
    cuda = ctypes.CDLL("libcuda.so.1")
    for name in ("cuMemGetAddressRange_v2", "cuMemGetAddressRange"):
        if hasattr(cuda, name):
            cuda.kf_range = getattr(cuda, name)
            break
    cuda.kf_range.argtypes = [
        ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.c_uint64,
    ]
    cuda.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(_Handle), ctypes.c_uint64]
    opener = getattr(cuda, "cuIpcOpenMemHandle_v2", None) or cuda.cuIpcOpenMemHandle
    opener.argtypes = [ctypes.POINTER(ctypes.c_uint64), _Handle, ctypes.c_uint]
    cuda.kf_open = opener
    return cuda


def export(cuda: Any, address: int) -> tuple[int, bytes, int]:
    """(status, the IPC handle of the allocation holding `address`, `address`'s offset in it)."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    rc = cuda.kf_range(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(address))
    if rc != 0:
        return rc, b"", 0
    handle = _Handle()
    rc = cuda.cuIpcGetMemHandle(ctypes.byref(handle), base)
    return rc, bytes(handle.reserved), address - base.value


def open_handle(cuda: Any, handle: bytes) -> tuple[int, int]:
    """(status, the device address the other process's allocation is mapped at here)."""
    raw = _Handle()
    ctypes.memmove(ctypes.addressof(raw), handle, 64)
    pointer = ctypes.c_uint64()
    rc = cuda.kf_open(ctypes.byref(pointer), raw, _LAZY_ENABLE_PEER_ACCESS)
    return rc, pointer.value


def wrap(address: int, elements: int) -> Any:
    """A float32 CUDA tensor over `elements` values at device `address` (no copy, no ownership)."""
    import torch

    from kernelfoundry.evaluation.device_share import view

    return view(address, elements * 4).view(torch.float32)


def probe() -> dict[str, Any]:
    """Both methods against a process sealed like the runner; a dict of what happened."""
    import torch

    if not torch.cuda.is_available():
        return {"available": False, "why": "no CUDA device"}
    result = probe_legacy()
    result["shareable_fd"] = probe_shareable_fd()
    return result


def _sandboxed_child(source: str, scratch: str, pass_fds: tuple[int, ...] = ()) -> Any:
    from kernelfoundry.evaluation.runner_client import runner_environment
    from kernelfoundry.sandbox import SandboxPolicy, spawn_sandboxed

    policy = SandboxPolicy(
        scratch=Path(scratch), env_allow=(), env_set=runner_environment(Path(scratch)), gpu=True
    )
    return spawn_sandboxed(
        [sys.executable, "-c", source],  # not -I: the child imports kernelfoundry from PYTHONPATH
        policy,
        pass_fds=pass_fds,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _exchange(process: Any, message: str) -> dict[str, Any]:
    """Write one line to the child and read its one-line JSON answer."""
    assert process.popen.stdin is not None and process.popen.stdout is not None
    process.popen.stdin.write((message + "\n").encode())
    process.popen.stdin.flush()
    ready, _, _ = select.select([process.popen.stdout], [], [], PROBE_TIMEOUT_S)
    line = process.popen.stdout.readline().decode(errors="replace") if ready else ""
    answer = json.loads(line) if line.strip() else {"error": "no reply"}
    return answer if isinstance(answer, dict) else {"error": f"not an object: {line[:200]}"}


def _end_child(process: Any, result: dict[str, Any]) -> None:
    """The child's last words where it already ended, then it and anything it started go."""
    if process.popen.stderr is not None and process.poll() is not None:
        result["child_stderr"] = process.popen.stderr.read().decode(errors="replace")[-600:]
    process.kill_all()


def probe_shareable_fd() -> dict[str, Any]:
    """The judge's cuMemCreate memory lent to the sandboxed child as a file descriptor
    (device_share.LentMemory, as the evaluation lends a shape's outputs)."""
    import torch

    from kernelfoundry.evaluation.device_share import LentMemory, ShareError, view

    try:
        lent = LentMemory.create(ELEMENTS * 4, torch.cuda.current_device())
    except ShareError as exc:
        return {"lent": False, "error": str(exc)}
    result: dict[str, Any] = {"lent": True}
    mine = view(lent.address, lent.size).view(torch.float32)
    mine.zero_()
    torch.cuda.synchronize()
    with tempfile.TemporaryDirectory(prefix="kf-ipc-probe-") as scratch:
        process = _sandboxed_child(_FD_CHILD, scratch, pass_fds=(lent.fd,))
        try:
            child = _exchange(process, json.dumps({"fd": lent.fd, "size": lent.size}))
            result["child"] = dict(child)
            result["writes"] = bool(child.get("wrote")) and bool((mine == 7.0).all().item())
            if child.get("read_only_mapped"):
                final = _exchange(process, "write")
                result["child"] = dict(final)
                process.wait(PROBE_TIMEOUT_S)
                torch.cuda.synchronize()
                result["read_only_refused"] = bool((mine == 7.0).all().item()) and str(
                    final.get("read_only_write", "")
                ).startswith("refused")
        except Exception as exc:
            result["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            _end_child(process, result)
            del mine
            lent.close()
    return result


def probe_legacy() -> dict[str, Any]:
    """Legacy IPC handles, both directions."""
    import torch

    cuda = driver()
    mine = torch.zeros(ELEMENTS, device="cuda")
    torch.cuda.synchronize()
    rc, handle, offset = export(cuda, mine.data_ptr())
    result: dict[str, Any] = {"available": True, "export_rc": rc}
    if rc != 0:
        return result
    with tempfile.TemporaryDirectory(prefix="kf-ipc-probe-") as scratch:
        process = _sandboxed_child(_CHILD, scratch)
        result["protections"] = list(process.protections)
        try:
            assert process.popen.stdin is not None
            request = {"handle": handle.hex(), "offset": offset, "elements": ELEMENTS}
            child = _exchange(process, json.dumps(request))
            result["child"] = {k: v for k, v in child.items() if k != "handle"}
            torch.cuda.synchronize()
            result["judge_to_runner"] = child.get("open_rc") == 0 and bool((mine == 7.0).all().item())
            result["runner_to_judge"] = False
            if child.get("export_rc") == 0:
                rc, pointer = open_handle(cuda, bytes.fromhex(child["handle"]))
                result["open_rc"] = rc
                if rc == 0:
                    started = time.perf_counter()
                    copied = wrap(pointer + int(child["offset"]), ELEMENTS).clone()
                    torch.cuda.synchronize()
                    result["copy_ms"] = round((time.perf_counter() - started) * 1e3, 3)
                    result["runner_to_judge"] = bool((copied == 3.0).all().item())
            process.popen.stdin.write(b"done\n")
            process.popen.stdin.flush()
            process.wait(PROBE_TIMEOUT_S)
        except Exception as exc:
            result["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            _end_child(process, result)
    return result


def main() -> int:
    result = probe()
    print(json.dumps(result), flush=True)
    legacy = result.get("judge_to_runner") and result.get("runner_to_judge")
    return 0 if legacy or result.get("shareable_fd", {}).get("writes") else 2


if __name__ == "__main__":
    raise SystemExit(main())
