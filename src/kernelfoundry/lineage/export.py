"""Moving one run between machines and backends: a single .tar.gz of JSON lines plus kernel sources.

Layout of the archive (format `kernelfoundry-lineage-run`, version 1):
  manifest.json          format, version, run id, export time, record counts
  run.json               the RunRecord
  candidates.jsonl       CandidateRecords, `code`/`glue` replaced by the names of the files below
  kernels/<id>.cu|.cpp   each candidate's source; kernels/<id>.glue.py its Python glue when it has one
  builds.jsonl  evaluations.jsonl  snapshots.jsonl  usage.jsonl  events.jsonl

Import goes through the repository's idempotent writes, so importing the same archive twice changes
nothing and a run already present keeps what it has. Import reads only the members it knows by name and
never extracts to disk. Must never depend on which backend is on either side.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kernelfoundry.lineage.codec import from_document, to_document, to_json
from kernelfoundry.lineage.errors import LineageError
from kernelfoundry.lineage.records import (
    ArchiveSnapshot,
    BuildRecord,
    CandidateRecord,
    EvaluationRecord,
    EventRecord,
    RunRecord,
    UsageRecord,
)
from kernelfoundry.lineage.repository import LineageRepository

FORMAT = "kernelfoundry-lineage-run"
FORMAT_VERSION = 1
_SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,95}")
_SOURCE_SUFFIX = {"cuda": ".cu", "cpp": ".cpp"}


@dataclass(frozen=True)
class ImportReport:
    """The run an archive held and, per record kind, how many records were new to the target."""

    run_id: str
    inserted: dict[str, int]


def _file_stem(candidate_id: str, used: set[str]) -> str:
    stem = (
        candidate_id
        if _SAFE_NAME.fullmatch(candidate_id)
        else hashlib.sha256(candidate_id.encode()).hexdigest()[:32]
    )
    while stem in used:
        stem += "_"
    used.add(stem)
    return stem


class _ArchiveWriter:
    def __init__(self, tar: tarfile.TarFile, mtime: float) -> None:
        self._tar = tar
        self._mtime = mtime

    def add(self, name: str, text: str) -> None:
        data = text.encode("utf-8")
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mtime = int(self._mtime)
        info.mode = 0o644
        self._tar.addfile(info, io.BytesIO(data))

    def add_lines(self, name: str, records: list[Any]) -> None:
        self.add(name, "".join(to_json(to_document(record)) + "\n" for record in records))


async def export_run(repository: LineageRepository, run_id: str, path: str | Path) -> dict[str, int]:
    """Write run `run_id` with its kernels, lineage and results to the archive `path`; returns counts."""
    run = await repository.get_run(run_id)
    if run is None:
        raise LineageError("run_not_found", f"no run {run_id!r} to export")
    candidates = await repository.candidates_of_run(run_id)
    tables: dict[str, list[Any]] = {
        "builds": await repository.builds_of_run(run_id),
        "evaluations": await repository.evaluations_of_run(run_id),
        "snapshots": await repository.snapshots(run_id),
        "usage": await repository.usage_of_run(run_id),
        "events": await repository.events_of_run(run_id),
    }
    counts = {"candidates": len(candidates), **{name: len(rows) for name, rows in tables.items()}}
    exported_at = datetime.now(UTC)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "run_id": run_id,
        "exported_at": exported_at.isoformat(),
        "counts": counts,
    }
    with tarfile.open(path, "w:gz") as tar:
        out = _ArchiveWriter(tar, exported_at.timestamp())
        out.add("manifest.json", json.dumps(manifest, indent=2) + "\n")
        out.add("run.json", to_json(to_document(run)) + "\n")
        used: set[str] = set()
        lines = []
        for candidate in candidates:
            stem = _file_stem(candidate.candidate_id, used)
            document = to_document(candidate)
            document["code_file"] = f"kernels/{stem}{_SOURCE_SUFFIX.get(candidate.language, '.txt')}"
            out.add(document["code_file"], document.pop("code"))
            glue = document.pop("glue")
            if glue:
                document["glue_file"] = f"kernels/{stem}.glue.py"
                out.add(document["glue_file"], glue)
            lines.append(to_json(document) + "\n")
        out.add("candidates.jsonl", "".join(lines))
        for name, rows in tables.items():
            out.add_lines(f"{name}.jsonl", rows)
    return counts


class _ArchiveReader:
    def __init__(self, tar: tarfile.TarFile, path: str | Path) -> None:
        self._tar = tar
        self._path = path

    def text(self, name: str) -> str:
        try:
            member = self._tar.getmember(name)
        except KeyError:
            raise LineageError("corrupt_archive", f"{self._path} has no member {name}") from None
        handle = self._tar.extractfile(member) if member.isfile() else None
        if handle is None:
            raise LineageError("corrupt_archive", f"{self._path}: member {name} is not a regular file")
        return handle.read().decode("utf-8")

    def documents(self, name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.text(name).splitlines() if line.strip()]


@dataclass(frozen=True)
class RunArchive:
    """Everything one archive file holds, decoded into records."""

    run: RunRecord
    candidates: list[CandidateRecord]
    builds: list[BuildRecord]
    evaluations: list[EvaluationRecord]
    snapshots: list[ArchiveSnapshot]
    usage: list[UsageRecord]
    events: list[EventRecord]


def read_archive(path: str | Path) -> RunArchive:
    """Every record an archive holds, checked before anything is written anywhere."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            archive = _ArchiveReader(tar, path)
            manifest = json.loads(archive.text("manifest.json"))
            if manifest.get("format") != FORMAT or manifest.get("format_version", 0) > FORMAT_VERSION:
                raise LineageError(
                    "unsupported_format",
                    f"{path} is {manifest.get('format')!r} version {manifest.get('format_version')!r}; "
                    f"this build reads {FORMAT!r} up to version {FORMAT_VERSION}",
                )
            candidates = []
            for document in archive.documents("candidates.jsonl"):
                document["code"] = archive.text(document.pop("code_file"))
                glue_file = document.pop("glue_file", None)
                document["glue"] = archive.text(glue_file) if glue_file else ""
                candidates.append(from_document(CandidateRecord, document))
            return RunArchive(
                run=from_document(RunRecord, json.loads(archive.text("run.json"))),
                candidates=candidates,
                builds=[from_document(BuildRecord, d) for d in archive.documents("builds.jsonl")],
                evaluations=[
                    from_document(EvaluationRecord, d) for d in archive.documents("evaluations.jsonl")
                ],
                snapshots=[from_document(ArchiveSnapshot, d) for d in archive.documents("snapshots.jsonl")],
                usage=[from_document(UsageRecord, d) for d in archive.documents("usage.jsonl")],
                events=[from_document(EventRecord, d) for d in archive.documents("events.jsonl")],
            )
    except LineageError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, OSError, ValueError, KeyError) as exc:
        raise LineageError("corrupt_archive", f"{path} is not a readable lineage archive: {exc!r}") from exc


async def import_run(repository: LineageRepository, path: str | Path) -> ImportReport:
    """Load the run archived at `path` into `repository`; idempotent, and nothing is written from an
    archive that does not read whole."""
    archive = read_archive(path)
    inserted = {"runs": int(await repository.save_run(archive.run))}
    writes: list[tuple[str, list[Any], Any]] = [
        ("candidates", archive.candidates, repository.save_candidate),
        ("builds", archive.builds, repository.save_build),
        ("evaluations", archive.evaluations, repository.save_evaluation),
        ("snapshots", archive.snapshots, repository.save_snapshot),
        ("usage", archive.usage, repository.save_usage),
    ]
    for name, records, save in writes:
        inserted[name] = 0
        for record in records:
            inserted[name] += await save(record)
    inserted["events"] = 0
    for event in archive.events:
        inserted["events"] += await repository.record_event(
            event.event_id, event.kind, event.run_id, event.payload, recorded_at=event.recorded_at
        )
    return ImportReport(run_id=archive.run.run_id, inserted=inserted)
