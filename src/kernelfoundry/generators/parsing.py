"""Reading a kernel out of a model's answer: fenced blocks or one structured-output JSON object.

Accepted shapes (docs/generators.md):

- Markdown: one fenced block of the unit (```cpp / ```c++ / ```cuda / ```cu), optionally a ```python
  block defining `ModelNew` (the glue) and a ```json block with the self-reported strategy
  (`{"memory": 0-3, "algorithm": 0-3, "parallelism": 0-3, "entry_point": "...", "rationale": "..."}`).
- Structured output: the whole answer (or its only ```json block) is an object with `code` and
  optionally `glue`, `entry_point`, `strategy` (the three levels) and `rationale`.

Tunables are the `// @kf.tunable` lines of the code. The static analysis decides the archive cell; the
self-report is only recorded. Anything that is not a usable kernel raises GenerationFailure("no_kernel")
with what was missing, so the run records it. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from kernelfoundry.domain.descriptors import AXES, LEVELS, Descriptors
from kernelfoundry.domain.kernel import DEFAULT_ENTRY_POINT, KernelSource, Language
from kernelfoundry.domain.tunables import TunableError, parse_tunables
from kernelfoundry.generators.providers.transport import GenerationFailure

MAX_CODE_CHARS = 200_000
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)```", re.DOTALL)
_CODE_TAGS: dict[str, tuple[Language, ...]] = {
    "cpp": ("cpp",),
    "c++": ("cpp",),
    "cxx": ("cpp",),
    "c": ("cpp",),
    "cuda": ("cuda",),
    "cu": ("cuda",),
}
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ParsedKernel:
    source: KernelSource
    strategy: Descriptors
    rationale: str


def parse_kernel(text: str, backend: str) -> ParsedKernel:
    """The kernel in a model's answer for `backend` ("cpu" -> C++ unit, "cuda" -> CUDA unit)."""
    language: Language = "cuda" if backend == "cuda" else "cpp"
    if not text.strip():
        raise GenerationFailure("no_kernel", "the model's answer is empty")
    blocks = [(tag.lower(), body) for tag, body in _FENCE.findall(text)]
    structured = _structured(text, blocks)
    if structured is not None and isinstance(structured.get("code"), str):
        return _from_object(structured, language)
    code_blocks = [body for tag, body in blocks if tag in _CODE_TAGS or (tag == "" and "kf_abi.h" in body)]
    if not code_blocks:
        raise GenerationFailure(
            "no_kernel",
            f"no ```{'cuda' if language == 'cuda' else 'cpp'} block and no JSON object with `code` in the"
            f" answer ({len(text)} characters)",
        )
    if len(code_blocks) > 1:
        units = [b for b in code_blocks if "kf_abi_version" in b or "KF_DEFINE_ABI_VERSION" in b]
        code_blocks = units or code_blocks
    glue = next((body for tag, body in blocks if tag in ("python", "py") and "ModelNew" in body), "")
    meta = structured or {}
    return _build(
        code=code_blocks[-1],
        glue=glue,
        entry_point=meta.get("entry_point"),
        strategy=meta.get("strategy", meta),
        rationale=meta.get("rationale"),
        language=language,
    )


def _structured(text: str, blocks: list[tuple[str, str]]) -> dict[str, Any] | None:
    candidates = [body for tag, body in blocks if tag == "json"]
    stripped = text.strip()
    if stripped.startswith("{"):
        candidates.insert(0, stripped)
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _from_object(data: dict[str, Any], language: Language) -> ParsedKernel:
    glue = data.get("glue") or ""
    if not isinstance(glue, str):
        raise GenerationFailure("no_kernel", "`glue` in the answer's JSON is not a string")
    return _build(
        code=data["code"],
        glue=glue,
        entry_point=data.get("entry_point"),
        strategy=data.get("strategy", {}),
        rationale=data.get("rationale"),
        language=language,
    )


def _build(
    *, code: str, glue: str, entry_point: Any, strategy: Any, rationale: Any, language: Language
) -> ParsedKernel:
    code = code.strip() + "\n"
    if len(code) > MAX_CODE_CHARS:
        raise GenerationFailure("no_kernel", f"the kernel is {len(code)} characters (limit {MAX_CODE_CHARS})")
    entry = entry_point if isinstance(entry_point, str) and entry_point else DEFAULT_ENTRY_POINT
    if not _IDENTIFIER.match(entry):
        raise GenerationFailure("no_kernel", f"entry point {entry!r} is not a C identifier")
    missing = [
        what
        for what, present in (
            ('#include "kf_abi.h"', "kf_abi.h" in code),
            (
                "KF_DEFINE_ABI_VERSION() (the kf_abi_version export)",
                "KF_DEFINE_ABI_VERSION" in code or "kf_abi_version" in code,
            ),
            (f"the entry point `{entry}`", re.search(rf"\b{re.escape(entry)}\s*\(", code) is not None),
        )
        if not present
    ]
    if missing:
        raise GenerationFailure("no_kernel", "the kernel lacks " + ", ".join(missing))
    if glue and "ModelNew" not in glue:
        raise GenerationFailure("no_kernel", "the glue does not define ModelNew")
    try:
        tunables = parse_tunables(code)
    except TunableError as exc:
        raise GenerationFailure("no_kernel", f"a @kf.tunable declaration is invalid: {exc}") from exc
    source = KernelSource(
        language=language,
        code=code,
        entry_point=entry,
        glue=glue.strip() + "\n" if glue else "",
        tunables=tunables,
    )
    return ParsedKernel(source, _strategy(strategy), str(rationale or "").strip()[:2000])


def _strategy(data: Any) -> Descriptors:
    """The self-reported levels; missing or out-of-range ones are 0 (the analysis decides anyway)."""
    if not isinstance(data, dict):
        return Descriptors()
    levels: dict[str, int] = {}
    for axis in AXES:
        value = data.get(axis)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        level = int(value)
        if 0 <= level < LEVELS:
            levels[axis] = level
    return Descriptors(**levels)
