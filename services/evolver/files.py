"""What the evolver writes to disk: the best kernel of each run, as it was built, beside its manifest.

`<state_dir>/runs/<run_id>/best.<ext>` (every -D value of the build a #define at its top),
`best_glue.py` when the kernel has glue, and `best.manifest.json` naming the entry point, the glue and the
build flags, so that `kernelfoundry evaluate TASK best.<ext>` builds the same unit the run measured.
"""

from __future__ import annotations

import json
from pathlib import Path

from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.services.evolver.state import CandidateState, RunState

EXTENSIONS = {"cpp": "cpp", "cuda": "cu"}


def best_folder(state_dir: Path, run_id: str) -> Path:
    return state_dir / "runs" / run_id


def best_file_name(language: str) -> str:
    return f"best.{EXTENSIONS.get(language, 'txt')}"


def write_best(state_dir: Path, run: RunState, candidate: CandidateState) -> str:
    """Write the run's best kernel (source, glue, manifest); returns the source file's absolute path."""
    folder = best_folder(state_dir, run.run_id)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / best_file_name(candidate.source.language)
    path.write_text(saved_source(run.run_id, candidate.info.candidate_id, candidate.source))
    glue = folder / "best_glue.py"
    if candidate.source.glue:
        glue.write_text(candidate.source.glue)
    else:
        glue.unlink(missing_ok=True)
    manifest = build_manifest(run, candidate, glue.name if candidate.source.glue else "")
    (folder / "best.manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return str(path.resolve())


def saved_source(run_id: str, candidate_id: str, source: KernelSource) -> str:
    """The kernel's code with every define its build passed (declared defaults and chosen values) on top.

    Tunables are guarded with `#ifndef NAME`, so these defines win exactly as `-DNAME=value` did.
    """
    defines = "".join(f"#define {k} {v}\n" for k, v in sorted(source.defines().items()))
    header = (
        f"// KernelFoundry run {run_id}, candidate {candidate_id}: the unit this run built and measured.\n"
        "// The defines below are the values its build passed as -DNAME=value.\n"
    )
    return header + defines + source.code


def build_manifest(run: RunState, candidate: CandidateState, glue_file: str) -> dict[str, object]:
    """What `kernelfoundry evaluate` needs beside the source to build and run the same unit."""
    return {
        "run_id": run.run_id,
        "candidate_id": candidate.info.candidate_id,
        "task": run.task.name,
        "language": candidate.source.language,
        "backend": run.config.backend,
        "hardware": run.config.hardware,
        "build_target": run.build_target,
        "entry_point": candidate.source.entry_point,
        "glue_file": glue_file,
        "defines": {k: str(v) for k, v in sorted(candidate.source.defines().items())},
        "build_flags": list(candidate.build_flags),
    }
