"""Asking an executable for its version, once per process.

Runs only `<tool> --version`-style commands with a short deadline; never compiles anything.
"""

from __future__ import annotations

import functools
import shutil
import subprocess


@functools.cache
def tool_output(executable: str, *args: str) -> str | None:
    """stdout of `executable args...`, or None if it is missing or fails."""
    path = shutil.which(executable)
    if path is None:
        return None
    try:
        done = subprocess.run([path, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
