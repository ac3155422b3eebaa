"""The outcome of one build: an artifact or a reason code, with the compiler's (trimmed) output.

Pure data. A failed build is a value, never an exception: the compiler's message is feedback for the
generator. Reason codes: compile_error, compile_timeout, resource_limit, toolchain_missing,
missing_entry_point, language_mismatch, unsupported_target, bad_define.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

COMPILE_ERROR = "compile_error"
COMPILE_TIMEOUT = "compile_timeout"
RESOURCE_LIMIT = "resource_limit"
TOOLCHAIN_MISSING = "toolchain_missing"
MISSING_ENTRY_POINT = "missing_entry_point"
LANGUAGE_MISMATCH = "language_mismatch"
UNSUPPORTED_TARGET = "unsupported_target"
BAD_DEFINE = "bad_define"

LOG_LIMIT_CHARS = 8000
_ERROR_LINE = re.compile(r"\berror\b", re.IGNORECASE)
_CONTEXT_BEFORE_FIRST_ERROR = 3


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    artifact: Path | None
    log: str
    duration_s: float
    cache_hit: bool
    reason: str | None
    toolchain: str
    flags: tuple[str, ...]


def trim_log(text: str, limit: int = LOG_LIMIT_CHARS) -> str:
    """Keep what a generator needs from compiler output: the first errors, within `limit` characters.

    Compilers put the root cause first and cascades after it, so the text is cut from a few lines
    before the first error onwards, then truncated at the end with a note saying how much was dropped.
    """
    text = text.strip()
    if len(text) <= limit:
        return text
    lines = text.splitlines()
    first_error = next((i for i, line in enumerate(lines) if _ERROR_LINE.search(line)), 0)
    start = max(0, first_error - _CONTEXT_BEFORE_FIRST_ERROR)
    kept: list[str] = []
    size = 0
    for line in lines[start:]:
        if size + len(line) + 1 > limit:
            break
        kept.append(line)
        size += len(line) + 1
    dropped = len(lines) - start - len(kept)
    head = f"[{start} lines before the first error trimmed]\n" if start else ""
    return f"{head}{chr(10).join(kept)}\n[{dropped} lines trimmed]"
