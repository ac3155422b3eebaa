"""Building a KernelSource for a target: sandboxed compile, export check, cache, one BuildResult.

`build()` never raises for a bad candidate: compile errors, timeouts, limits, a missing toolchain or
a missing entry point all come back as BuildResult(ok=False, reason=..., log=...). Compiler output
is stripped of the private build directory's path (stable across builds, and cacheable) and trimmed
to the first errors. The built library must export `kf_abi_version` and the entry point, checked
with `nm -D --defined-only` (the compiler service never loads untrusted code).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from kernelfoundry.abi import include_dir
from kernelfoundry.domain.kernel import KernelSource, TunableValue
from kernelfoundry.domain.tunables import is_define_name, is_define_value, value_text
from kernelfoundry.toolchains.cache import BuildCache, build_key
from kernelfoundry.toolchains.result import (
    BAD_DEFINE,
    COMPILE_ERROR,
    COMPILE_TIMEOUT,
    LANGUAGE_MISMATCH,
    MISSING_ENTRY_POINT,
    RESOURCE_LIMIT,
    TOOLCHAIN_MISSING,
    UNSUPPORTED_TARGET,
    BuildResult,
    trim_log,
)
from kernelfoundry.toolchains.sandbox import Limits, SandboxOutcome, run_sandboxed
from kernelfoundry.toolchains.target import BuildTarget
from kernelfoundry.toolchains.toolchain import Toolchain, UnsupportedTarget, toolchain_for

ABI_VERSION_SYMBOL = "kf_abi_version"
UNIT_STEM = "unit"

_RESOURCE_SIGNS = (
    "virtual memory exhausted",
    "out of memory",
    "std::bad_alloc",
    "cannot allocate memory",
    "killed signal terminated program",
    # cc1plus starved of memory by the limit sometimes dies on a failed allocation's null (an ICE) rather
    # than saying so: test_compiler_starved_of_memory_is_resource_limit failed so in CI
    "segmentation fault signal terminated program",
    "cpu time limit exceeded",
    "file size limit exceeded",
)
_RESOURCE_SIGNALS = {"SIGXCPU", "SIGXFSZ", "SIGKILL"}


def define_flags(defines: Mapping[str, TunableValue]) -> tuple[str, ...]:
    """`-DNAME=value` per define, sorted; raises ValueError for a name or value that is not a token."""
    flags = []
    for name, value in sorted(defines.items()):
        text = value_text(value)
        if not is_define_name(name):
            raise ValueError(f"define name `{name}` is not a C identifier")
        if not is_define_value(text):
            raise ValueError(f"define {name}=`{text}` is not a single token ([A-Za-z0-9_.+-])")
        flags.append(f"-D{name}={text}")
    return tuple(flags)


def build(
    source: KernelSource,
    target: BuildTarget,
    cache: BuildCache | None = None,
    *,
    toolchain: Toolchain | None = None,
    limits: Limits | None = None,
    out_dir: Path | None = None,
) -> BuildResult:
    """Compile `source` for `target`.

    With a cache, the artifact lives in the cache; without one it is written to `out_dir` (default:
    a fresh temp dir that the caller owns).
    """
    started = time.monotonic()
    chain = toolchain or toolchain_for(target)
    limits = limits or Limits()
    version = chain.version()

    def fail(reason: str, log: str, flags: tuple[str, ...] = ()) -> BuildResult:
        return BuildResult(
            False, None, log, time.monotonic() - started, False, reason, version or chain.name, flags
        )

    if version is None:
        return fail(
            TOOLCHAIN_MISSING, f"{chain.name}: executable `{chain.executable}` not found or not runnable"
        )
    if source.language not in chain.languages:
        return fail(
            LANGUAGE_MISMATCH,
            f"{chain.name} builds {', '.join(sorted(chain.languages))} sources for `{target}`, "
            f"not `{source.language}`",
        )
    try:
        flags = chain.flags(target)
    except UnsupportedTarget as exc:
        return fail(UNSUPPORTED_TARGET, str(exc))
    try:
        flags += define_flags(source.defines())
    except ValueError as exc:
        return fail(BAD_DEFINE, str(exc), flags)

    key = build_key(source.code, source.entry_point, flags, version, target.subject_token())
    if cache is not None:
        entry = cache.lookup(key)
        if entry is not None:
            record = entry.record
            elapsed = time.monotonic() - started
            return BuildResult(
                bool(record["ok"]),
                entry.artifact,
                str(record["log"]),
                elapsed,
                True,
                record["reason"],
                version,
                flags,
            )

    work = cache.scratch_dir() if cache is not None else Path(tempfile.mkdtemp(prefix="kf-build-"))
    try:
        reason, log, library = _compile(chain, source, flags, limits, work)
        if cache is not None and reason not in (COMPILE_TIMEOUT, RESOURCE_LIMIT):
            artifact = cache.store(key, library, {"ok": reason is None, "reason": reason, "log": log})
        elif library is not None:
            destination = out_dir or Path(tempfile.mkdtemp(prefix="kf-artifact-"))
            destination.mkdir(parents=True, exist_ok=True)
            artifact = Path(shutil.move(str(library), destination / f"{key}.so"))
        else:
            artifact = None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return BuildResult(
        reason is None, artifact, log, time.monotonic() - started, False, reason, version, flags
    )


def _compile(
    chain: Toolchain, source: KernelSource, flags: tuple[str, ...], limits: Limits, work: Path
) -> tuple[str | None, str, Path | None]:
    """Run the compiler in `work`: (failure reason or None, trimmed log, the library if it succeeded)."""
    unit = work / f"{UNIT_STEM}{chain.source_suffix}"
    library = work / f"{UNIT_STEM}.so"
    unit.write_text(source.code, encoding="utf-8")
    outcome = run_sandboxed(chain.command(unit, library, flags, include_dir()), work, limits)
    log = trim_log(outcome.output.replace(f"{work}/", ""))
    reason = _failure_reason(outcome, library)
    if reason is None:
        missing = _missing_exports(library, (ABI_VERSION_SYMBOL, source.entry_point))
        if missing:
            reason, log = MISSING_ENTRY_POINT, f"{missing}\n{log}".strip()
    elif reason == COMPILE_TIMEOUT:
        log = f"build exceeded its deadline of {limits.wall_s:g} s\n{log}".strip()
    elif reason == RESOURCE_LIMIT:
        how = outcome.signal_name or f"exit {outcome.returncode}"
        log = (
            f"build exceeded a resource limit ({how}; limits: cpu {limits.cpu_s} s, "
            f"memory {limits.memory_bytes >> 20} MiB, files {limits.file_bytes >> 20} MiB)\n{log}"
        ).strip()
    return reason, log, library if reason is None else None


def _failure_reason(outcome: SandboxOutcome, library: Path) -> str | None:
    if outcome.timed_out:
        return COMPILE_TIMEOUT
    lowered = outcome.output.lower()
    if outcome.signal_name in _RESOURCE_SIGNALS or any(sign in lowered for sign in _RESOURCE_SIGNS):
        return RESOURCE_LIMIT
    if outcome.returncode != 0 or not library.is_file():
        return COMPILE_ERROR
    return None


def _missing_exports(library: Path, required: tuple[str, ...]) -> str | None:
    """A message naming the required symbols the library does not export, or None if all are there."""
    try:
        listing = subprocess.run(
            ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return None  # no nm here: the executor's loader reports a missing symbol instead
    if listing.returncode != 0:
        return f"cannot read the dynamic symbols of the built library: {listing.stderr.strip()}"
    exported = {line.split()[-1] for line in listing.stdout.splitlines() if line.strip()}
    missing = [name for name in required if name not in exported]
    if not missing:
        return None
    hints = []
    for name in missing:
        mangled = [
            symbol for symbol in exported if f"{len(name)}{name}" in symbol and symbol.startswith("_Z")
        ]
        if mangled:
            hints.append(f"`{name}` is exported with C++ name mangling ({mangled[0]}): declare it KF_EXPORT")
    return (
        f"the built library does not export {', '.join(f'`{n}`' for n in missing)} "
        f"(every unit needs KF_DEFINE_ABI_VERSION() and a KF_EXPORT entry point)"
        + "".join(f"; {hint}" for hint in hints)
    )
