"""Lineage store benchmark: sustained event writes on SQLite, and lineage-tree query latency.

    python bench/store_bench.py [--events 20000] [--candidates 10000] [--repeats 15] [--mongomock]

Writes the way the store service does: for each event, the typed record (candidate, build, evaluation or
usage) and then its journal entry, one awaited call at a time, on a WAL-mode file in a temporary folder.
The lineage tree is one run of `--candidates` candidates grown like an evolutionary search (each child
picks one parent, sometimes two, among the 200 most recent), queried from its root (all descendants),
from its newest leaf (all ancestors) and from a candidate in the middle. `--mongomock` repeats the tree
query on mongomock-motor's in-memory database, which has no indexes: that figure tests the code path,
not MongoDB's speed. Prints a table and writes bench/results/store_bench.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sqlite3
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.lineage import (
    BuildRecord,
    CandidateRecord,
    EvaluationRecord,
    LineageRepository,
    RunRecord,
    UsageRecord,
)
from kernelfoundry.lineage.sqlite_repository import SqliteLineageRepository

T0 = datetime(2026, 11, 29, tzinfo=UTC)
KERNEL = '#include "kf_abi.h"\n' + "// body line of a typical generated kernel\n" * 60
RESULTS = Path(__file__).parent / "results" / "store_bench.json"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def candidate(i: int, parents: tuple[str, ...], run_id: str = "bench-run") -> CandidateRecord:
    return CandidateRecord(
        candidate_id=f"cand-{i:06d}",
        run_id=run_id,
        parent_ids=parents,
        iteration=i // 16,
        generator="openai",
        language="cuda",
        code=KERNEL,
        params={"BLOCK_SIZE": 256},
        self_reported=Descriptors(1, 1, 1),
        analysed=Descriptors(1, 0, 1),
        created_at=T0 + timedelta(milliseconds=i),
    )


def event_stream(count: int) -> list[tuple[str, Any]]:
    """`count` events in the order a run produces them: candidate, build, evaluation, usage, ..."""
    events: list[tuple[str, Any]] = []
    i = 0
    while len(events) < count:
        at = T0 + timedelta(milliseconds=i)
        cid = f"cand-{i:06d}"
        parents = (f"cand-{i - 1:06d}",) if i else ()
        events.append(("candidate", candidate(i, parents)))
        events.append(
            (
                "build",
                BuildRecord(
                    candidate_id=cid,
                    run_id="bench-run",
                    target="cuda.sm90",
                    ok=True,
                    log="nvcc -O3 ...\n" * 40,
                    duration_s=2.5,
                    artifact=f"artifacts/{cid}",
                    created_at=at,
                ),
            )
        )
        events.append(
            (
                "evaluation",
                EvaluationRecord(
                    candidate_id=cid,
                    run_id="bench-run",
                    hardware="h200",
                    correct=i % 3 != 0,
                    reason="" if i % 3 else "output_mismatch",
                    runtime_ms=0.5,
                    baseline_ms=1.0,
                    speedup=2.0 if i % 3 else None,
                    details={"seeds": 5},
                    evaluated_at=at,
                ),
            )
        )
        events.append(
            (
                "usage",
                UsageRecord(
                    usage_id=f"use-{i}",
                    run_id="bench-run",
                    generator="openai",
                    prompt_tokens=1500,
                    completion_tokens=900,
                    cost_usd=0.01,
                    recorded_at=at,
                ),
            )
        )
        i += 1
    return events[:count]


async def apply(repository: LineageRepository, n: int, kind: str, record: Any) -> None:
    save = {
        "candidate": repository.save_candidate,
        "build": repository.save_build,
        "evaluation": repository.save_evaluation,
        "usage": repository.save_usage,
    }[kind]
    await save(record)
    await repository.record_event(f"evt-{n}", kind, "bench-run", {"n": n}, recorded_at=T0)


async def bench_writes(folder: Path, count: int) -> dict[str, float]:
    repository = await SqliteLineageRepository.open(folder / "writes.db")
    await repository.save_run(RunRecord(run_id="bench-run", task_name="matmul", created_at=T0))
    events = event_stream(count)
    latencies: list[float] = []
    started = time.perf_counter()
    for n, (kind, record) in enumerate(events):
        t = time.perf_counter()
        await apply(repository, n, kind, record)
        latencies.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - started
    redelivered = time.perf_counter()
    for n, (kind, record) in enumerate(events[:2000]):
        await apply(repository, n, kind, record)
    redelivery_rate = min(2000, count) / (time.perf_counter() - redelivered)
    await repository.close()
    return {
        "events": count,
        "seconds": elapsed,
        "events_per_s": count / elapsed,
        "p50_ms": percentile(latencies, 0.5) * 1e3,
        "p99_ms": percentile(latencies, 0.99) * 1e3,
        "redelivered_events_per_s": redelivery_rate,
        "file_mib": (folder / "writes.db").stat().st_size / 2**20,
    }


def grow_tree(size: int, seed: int = 7) -> list[CandidateRecord]:
    rng = random.Random(seed)
    records = [candidate(0, (), "tree-run")]
    for i in range(1, size):
        window = max(0, i - 200)
        first = rng.randrange(window, i)
        parents = {f"cand-{first:06d}"}
        if rng.random() < 0.2:
            parents.add(f"cand-{rng.randrange(window, i):06d}")
        records.append(candidate(i, tuple(sorted(parents)), "tree-run"))
    return records


async def bench_tree(repository: LineageRepository, records: list[CandidateRecord], repeats: int) -> dict:
    await repository.save_run(RunRecord(run_id="tree-run", task_name="matmul", created_at=T0))
    for record in records:
        await repository.save_candidate(record)
    parents = {p for record in records for p in record.parent_ids}
    middle = next(r for r in records[len(records) // 2 :] if r.candidate_id in parents)
    probes = {
        "root": records[0].candidate_id,
        "middle": middle.candidate_id,  # the first from the middle on that has children
        "newest_leaf": records[-1].candidate_id,
    }
    figures: dict[str, Any] = {}
    for label, candidate_id in probes.items():
        times = []
        tree = None
        for _ in range(repeats):
            t = time.perf_counter()
            tree = await repository.lineage(candidate_id)
            times.append(time.perf_counter() - t)
        assert tree is not None
        figures[label] = {
            "candidate_id": candidate_id,
            "ancestors": len(tree.ancestors),
            "descendants": len(tree.descendants),
            "max_depth": max((n.depth for n in (*tree.ancestors, *tree.descendants)), default=0),
            "median_ms": statistics.median(times) * 1e3,
            "p95_ms": percentile(times, 0.95) * 1e3,
        }
    return figures


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--candidates", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--mongomock", action="store_true", help="also time the tree on mongomock-motor")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="kf-store-bench-") as tmp:
        folder = Path(tmp)
        writes = await bench_writes(folder, args.events)
        records = grow_tree(args.candidates)
        sqlite_repo = await SqliteLineageRepository.open(folder / "tree.db")
        trees = {"sqlite": await bench_tree(sqlite_repo, records, args.repeats)}
        await sqlite_repo.close()
        if args.mongomock:
            from mongomock_motor import AsyncMongoMockClient

            from kernelfoundry.lineage.mongo_repository import MongoLineageRepository

            mock = await MongoLineageRepository.open(AsyncMongoMockClient()["bench"])
            trees["mongo-mongomock"] = await bench_tree(mock, records, max(1, args.repeats // 5))

    result = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "cpus": os.cpu_count(),
            # other work on the machine moves these figures; the 1-minute load says how busy it was
            "load_1min_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        },
        "sqlite_writes": writes,
        "lineage_tree": {"candidates": args.candidates, "repeats": args.repeats, "backends": trees},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")

    print(f"SQLite sustained writes ({writes['events']} events, typed record + journal each)")
    print(f"  {'events/s':>12} {'p50 ms':>8} {'p99 ms':>8} {'redelivered/s':>14} {'file MiB':>9}")
    print(
        f"  {writes['events_per_s']:>12.0f} {writes['p50_ms']:>8.3f} {writes['p99_ms']:>8.3f} "
        f"{writes['redelivered_events_per_s']:>14.0f} {writes['file_mib']:>9.1f}"
    )
    print(f"Lineage tree of {args.candidates} candidates")
    header = ("backend", "probe", "ancestors", "descend.", "depth", "median ms", "p95 ms")
    print("  {:<16} {:<12} {:>9} {:>9} {:>6} {:>10} {:>8}".format(*header))
    for backend, figures in trees.items():
        for label, f in figures.items():
            print(
                f"  {backend:<16} {label:<12} {f['ancestors']:>9} {f['descendants']:>9} {f['max_depth']:>6} "
                f"{f['median_ms']:>10.2f} {f['p95_ms']:>8.2f}"
            )
    print(f"load average (1 min) before/after: {result['machine']['load_1min_before_after']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
