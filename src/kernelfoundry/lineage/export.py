"""Moving one run between machines and backends: a single .tar.gz of JSON lines plus kernel sources.

Layout of the archive (format `kernelfoundry-lineage-run`, version 1):
  manifest.json          format, version, run id, export time, record counts
  run.json               the RunRecord
  candidates.jsonl       CandidateRecords, `code`/`glue` replaced by the names of the files below
  kernels/<id>.cu|.cpp   each candidate's source; kernels/<id>.glue.py its Python glue when it has one
  builds.jsonl  evaluations.jsonl  snapshots.jsonl  usage.jsonl  events.jsonl

Export builds the archive in memory (`export_run_bytes`); nothing of a run id reaches a path on the store's
side. Import reads bytes, never a path the request names: it expands the gzip up to a cap (a gzip bomb is
refused, not expanded), reads only the members it knows by name, never extracts to disk, and checks the
archive as a whole before writing anything (`check_archive`: format version, the run id's format, every
record belonging to that run, candidate ids, statuses, hardware tokens, builds and evaluations naming
candidates the archive holds, the manifest's counts). A finished, failed or cancelled run is imported as
it is; an unfinished one as `stopped`, which no evolver resumes on its own. Writes go through the
repository's idempotent writes, the run record last: it is the commit marker, so an import cut short
leaves no run that lists, and importing again completes it; importing the same archive twice changes
nothing and a run already present keeps what it has. Must never depend on which backend is on either side.
"""

from __future__ import annotations

import dataclasses
import gzip
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

from kernelfoundry.ids import is_candidate_id, is_run_id
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
# How far one archive may expand when imported, unless the caller says otherwise
# (KF_API_MAX_DECOMPRESSED_BYTES)
DEFAULT_MAX_DECOMPRESSED_BYTES = 512 * 1024 * 1024
# A hardware name as lineage keeps it (cpu.x86_64, cuda.h200; older records: h200): a token, never empty
_HARDWARE = re.compile(r"[a-z0-9_][a-z0-9_.-]{0,64}")
_FINISHED = ("finished", "failed", "cancelled")
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
    data, counts = await export_run_bytes(repository, run_id)
    Path(path).write_bytes(data)
    return counts


async def export_run_bytes(repository: LineageRepository, run_id: str) -> tuple[bytes, dict[str, int]]:
    """Run `run_id` with its kernels, lineage and results as archive bytes, built in memory; and counts."""
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
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
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
    return buffer.getvalue(), counts


class _ArchiveReader:
    def __init__(self, tar: tarfile.TarFile) -> None:
        self._tar = tar

    def text(self, name: str) -> str:
        try:
            member = self._tar.getmember(name)
        except KeyError:
            raise LineageError("corrupt_archive", f"the archive has no member {name}") from None
        handle = self._tar.extractfile(member) if member.isfile() else None
        if handle is None:
            raise LineageError("corrupt_archive", f"the archive's member {name} is not a regular file")
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
    manifest: dict[str, Any] = dataclasses.field(default_factory=dict)


def expand(data: bytes, max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes:
    """The archive's tar bytes, refusing to expand past `max_bytes` (a gzip bomb stops at the cap)."""
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
        expanded = stream.read(max_bytes + 1)
    if len(expanded) > max_bytes:
        raise LineageError(
            "archive_too_large",
            f"the archive expands past {max_bytes} bytes, the most this store imports"
            " (KF_API_MAX_DECOMPRESSED_BYTES)",
        )
    return expanded


def read_archive_bytes(data: bytes, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> RunArchive:
    """Every record archive bytes hold, decoded and checked as a whole before anything is written."""
    try:
        with tarfile.open(fileobj=io.BytesIO(expand(data, max_decompressed)), mode="r:") as tar:
            archive = _ArchiveReader(tar)
            manifest = json.loads(archive.text("manifest.json"))
            if not isinstance(manifest, dict):
                raise LineageError("corrupt_archive", "manifest.json is not a JSON object")
            version = manifest.get("format_version")
            if (
                manifest.get("format") != FORMAT
                or not isinstance(version, int)
                or not 1 <= version <= FORMAT_VERSION
            ):
                raise LineageError(
                    "unsupported_format",
                    f"the archive is {str(manifest.get('format'))[:64]!r} version {str(version)[:16]!r}; "
                    f"this build reads {FORMAT!r} versions 1 to {FORMAT_VERSION}",
                )
            candidates = []
            for document in archive.documents("candidates.jsonl"):
                document["code"] = archive.text(str(document.pop("code_file")))
                glue_file = document.pop("glue_file", None)
                document["glue"] = archive.text(str(glue_file)) if glue_file else ""
                candidates.append(from_document(CandidateRecord, document))
            result = RunArchive(
                run=from_document(RunRecord, json.loads(archive.text("run.json"))),
                candidates=candidates,
                builds=[from_document(BuildRecord, d) for d in archive.documents("builds.jsonl")],
                evaluations=[
                    from_document(EvaluationRecord, d) for d in archive.documents("evaluations.jsonl")
                ],
                snapshots=[from_document(ArchiveSnapshot, d) for d in archive.documents("snapshots.jsonl")],
                usage=[from_document(UsageRecord, d) for d in archive.documents("usage.jsonl")],
                events=[from_document(EventRecord, d) for d in archive.documents("events.jsonl")],
                manifest=manifest,
            )
    except LineageError:
        raise
    except (
        tarfile.TarError,
        EOFError,
        zlib.error,
        OSError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
    ) as exc:
        # the reason without the exception's own text: it can carry server paths and class names
        raise LineageError(
            "corrupt_archive", "the archive is not a readable lineage archive (gzip of a tar of JSON)"
        ) from exc
    return check_archive(result)


def read_archive(path: str | Path, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> RunArchive:
    """Every record the archive file `path` holds, checked before anything is written anywhere."""
    return read_archive_bytes(Path(path).read_bytes(), max_decompressed)


def _bad(message: str) -> LineageError:
    return LineageError("invalid_archive", message)


def check_archive(archive: RunArchive) -> RunArchive:
    """The archive checked as a whole, with an unfinished run turned into a stopped one; raises
    LineageError(invalid_archive) naming the first record that is wrong."""
    run = archive.run
    run_id = run.run_id
    if not is_run_id(run_id):
        raise _bad("run.json: run_id is not a run id (run- and 1 to 32 of a-z, 0-9)")
    if archive.manifest.get("run_id", run_id) != run_id:
        raise _bad("manifest.json names another run than run.json")
    if not _HARDWARE.fullmatch(run.hardware):
        raise _bad(f"run.json: hardware {run.hardware[:64]!r} is not a hardware name such as cpu.x86_64")
    tables: dict[str, list[Any]] = {
        "candidates": archive.candidates,
        "builds": archive.builds,
        "evaluations": archive.evaluations,
        "snapshots": archive.snapshots,
        "usage": archive.usage,
    }
    for name, rows in tables.items():
        for row in rows:
            if row.run_id != run_id:
                raise _bad(f"{name}.jsonl: a record of run {row.run_id[:64]!r} in the archive of {run_id}")
    for event in archive.events:
        if event.run_id not in ("", run_id):
            raise _bad(f"events.jsonl: an event of run {event.run_id[:64]!r} in the archive of {run_id}")
    candidate_ids = [c.candidate_id for c in archive.candidates]
    known = set(candidate_ids)
    if len(known) != len(candidate_ids):
        raise _bad("candidates.jsonl: a candidate id appears twice")
    for candidate in archive.candidates:
        for cid in (candidate.candidate_id, *candidate.parent_ids):
            if not is_candidate_id(cid):
                raise _bad(f"candidates.jsonl: {cid[:64]!r} is not a candidate id")
    for name, rows in (("builds", archive.builds), ("evaluations", archive.evaluations)):
        for row in rows:
            if row.candidate_id not in known:
                raise _bad(f"{name}.jsonl: candidate {row.candidate_id[:64]!r} is not in candidates.jsonl")
    for evaluation in archive.evaluations:
        if evaluation.hardware and not _HARDWARE.fullmatch(evaluation.hardware):
            raise _bad(f"evaluations.jsonl: hardware {evaluation.hardware[:64]!r} is not a hardware name")
    counts = archive.manifest.get("counts")
    if isinstance(counts, dict):
        actual = {**{n: len(r) for n, r in tables.items()}, "events": len(archive.events)}
        for name, count in counts.items():
            if name in actual and count != actual[name]:
                raise _bad(f"manifest.json counts {count!r} {name}; the archive holds {actual[name]}")
    if run.status not in _FINISHED:
        archive = dataclasses.replace(archive, run=dataclasses.replace(run, status="stopped"))
    return archive


async def import_run(
    repository: LineageRepository, path: str | Path, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> ImportReport:
    """Load the run archived in the file `path` into `repository` (see `import_run_bytes`)."""
    return await import_run_bytes(repository, Path(path).read_bytes(), max_decompressed)


async def import_run_bytes(
    repository: LineageRepository, data: bytes, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> ImportReport:
    """Load archive bytes into `repository`; idempotent. Nothing is written from an archive that does not
    read and check whole, and the run record is written last (the commit marker)."""
    archive = read_archive_bytes(data, max_decompressed)
    inserted: dict[str, int] = {}
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
    inserted["runs"] = int(await repository.save_run(archive.run))
    return ImportReport(run_id=archive.run.run_id, inserted=inserted)
