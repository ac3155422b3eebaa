"""Which sandbox protections this host's GPU stack runs under: probed once per process, strictest first.

Some hosts' NVIDIA stacks fail `cuInit` inside a user namespace or under Landlock (seen on an H200 host:
CUDA_ERROR_OPERATING_SYSTEM, 304, in the sandboxed runner while the same call succeeded outside). A
sandbox that simply failed there would leave GPU evaluation impossible; one that silently dropped every
protection would be worse. So a GPU policy whose `relax` is None gets the smallest set of protections to
leave out under which a tiny probe (`cuInit` and a device count through libcuda, no torch) succeeds,
trying LADDER in order; what is left out is absent from `protections` and logged by the caller's report.
Without any working rung the strictest set is kept and the runner's own start-up reports the failure.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import tempfile
from pathlib import Path

# Sets of RELAXABLE protections to leave out, strictest first.
LADDER: tuple[tuple[str, ...], ...] = (
    (),
    ("landlock",),
    ("userns",),
    ("userns", "landlock"),
    ("userns", "landlock", "rlimits"),
)
PROBE_TIMEOUT_S = 60.0

_PROBE = """
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError:
    sys.exit(2)
count = ctypes.c_int(0)
status = cuda.cuInit(0)
if status == 0:
    status = cuda.cuDeviceGetCount(ctypes.byref(count))
print(status, count.value)
sys.exit(0 if status == 0 and count.value > 0 else 3)
"""


def probe(relax: tuple[str, ...]) -> tuple[bool, str]:
    """Run the probe in a GPU sandbox that leaves `relax` out; (worked, what it printed)."""
    from kernelfoundry.sandbox.policy import SandboxPolicy
    from kernelfoundry.sandbox.process import spawn_sandboxed

    with tempfile.TemporaryDirectory(prefix="kf-gpu-probe-") as scratch:
        policy = SandboxPolicy.for_python(Path(scratch), gpu=True, relax=relax)
        process = spawn_sandboxed(
            [sys.executable, "-I", "-c", _PROBE], policy, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            code = process.wait(PROBE_TIMEOUT_S)
            output = process.popen.stdout.read().decode(errors="replace") if process.popen.stdout else ""
        except subprocess.TimeoutExpired:
            return False, "probe timed out"
        finally:
            process.kill_all()
    return code == 0, output.strip()


@functools.cache
def gpu_relaxations() -> tuple[str, ...]:
    """The strictest rung of LADDER under which CUDA initialises here (the strictest one if none does)."""
    for relax in LADDER:
        worked, _ = probe(relax)
        if worked:
            return relax
    return LADDER[0]
