"""What every benchmark records beside its figures: the commit measured, whether the tree differed from it,
the machine and its load. Standard library only (the GPU machine and the chaos benches import it without
torch or the transport packages).

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from provenance import load_average, machine, measured_commit, uncommitted_changes
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The paths a change to which changes what the chaos and fuzz benches measure.
SYSTEM_PATHS = ("src", "services", "protos", "tests/chaos")


def measured_commit(short: bool = False) -> str:
    """KF_BENCH_COMMIT where the tree travelled without git (the accelerator machine's copy), else HEAD
    (git's short form with `short`); "unknown" outside a repository."""
    named = os.environ.get("KF_BENCH_COMMIT", "")
    if named:
        return named
    argv = ["git", "rev-parse", *(["--short"] if short else []), "HEAD"]
    found = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    return found.stdout.strip() or "unknown"


def uncommitted_changes(paths: Sequence[str] = SYSTEM_PATHS) -> bool:
    """Whether tracked files under `paths` differ from the commit measured."""
    found = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", "--", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return bool(found.stdout.strip())


def load_average() -> list[float]:
    """The 1-, 5- and 15-minute load averages, rounded to two decimals."""
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    """The host's CPU count, platform and Python version."""
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
