"""The kernel ABI header (kf_abi.h) that every compiled unit is built against.

This package only locates the header; loading and calling units belongs to the executor's backends.
"""

from __future__ import annotations

from pathlib import Path

ABI_VERSION = 1
HEADER_NAME = "kf_abi.h"


def include_dir() -> Path:
    """Directory to pass with -I so that `#include "kf_abi.h"` resolves."""
    return Path(__file__).parent
