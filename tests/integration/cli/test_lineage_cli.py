"""`kernelfoundry lineage …` against the real LineageApi on a gRPC server over a SQLite store.

Each server runs on its own event loop in a background thread, so the CLI (synchronous, through typer's
CliRunner, with its own asyncio.run per command) talks to it exactly as it would to the store service.

The sample lineage:
  run-a (matmul, cuda.h200, finished): a1 -> a2, a1 -> a3, (a2, a3) -> a4;
      a3 fails to build (compile_error), a4 is wrong (output_mismatch); a2 is the best at 1.8x.
  run-b (softmax, cpu.x86_64, running): b1 (1.2x) -> b2 (timeout).
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kernelfoundry.cli.main import app
from kernelfoundry.client import LineageClient
from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.lineage import (
    ArchiveSnapshot,
    BuildRecord,
    CandidateRecord,
    EvaluationRecord,
    LineageRepository,
    RunRecord,
    UsageRecord,
)
from tests.integration.lineage_server import StoreServer

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def candidate(cid: str, run_id: str, parents: tuple[str, ...], iteration: int, minute: float):
    return CandidateRecord(
        candidate_id=cid,
        run_id=run_id,
        parent_ids=parents,
        iteration=iteration,
        generator="heuristic" if not parents else "openai",
        language="cuda" if run_id == "run-a" else "cpp",
        code=f'#include "kf_abi.h"\n// kernel {cid}\n',
        params={"BLOCK": 128},
        analysed=Descriptors(1, 0, 1),
        created_at=at(minute),
    )


def evaluation(cid: str, run_id: str, hardware: str, speedup: float | None, minute: float, reason: str = ""):
    return EvaluationRecord(
        candidate_id=cid,
        run_id=run_id,
        hardware=hardware,
        correct=speedup is not None,
        reason=reason,
        runtime_ms=None if speedup is None else 2.0 / speedup,
        baseline_ms=2.0,
        speedup=speedup,
        evaluated_at=at(minute),
    )


def cell(cid: str, memory: int, speedup: float) -> dict[str, Any]:
    return {"memory": memory, "algorithm": 0, "parallelism": 1, "candidate_id": cid, "speedup": speedup}


async def fill(repository: LineageRepository) -> None:
    await repository.save_run(
        RunRecord(
            run_id="run-a",
            task_name="matmul",
            task_source="tasks/matmul",
            config={"iterations": 2, "population": 4},
            hardware="cuda.h200",
            status="finished",
            created_at=at(0),
            finished_at=at(30),
            summary={"best_speedup": 1.8},
        )
    )
    await repository.save_run(
        RunRecord(run_id="run-b", task_name="softmax", hardware="cpu.x86_64", created_at=at(60))
    )
    for record in (
        candidate("a1", "run-a", (), 0, 1),
        candidate("a2", "run-a", ("a1",), 1, 2),
        candidate("a3", "run-a", ("a1",), 1, 3),
        candidate("a4", "run-a", ("a2", "a3"), 2, 4),
        candidate("b1", "run-b", (), 0, 61),
        candidate("b2", "run-b", ("b1",), 1, 62),
    ):
        await repository.save_candidate(record)
    for cid, run_id, ok, minute in (
        ("a1", "run-a", True, 1.1),
        ("a2", "run-a", True, 2.1),
        ("a3", "run-a", False, 3.1),
        ("a4", "run-a", True, 4.1),
        ("b1", "run-b", True, 61.1),
        ("b2", "run-b", True, 62.1),
    ):
        await repository.save_build(
            BuildRecord(
                candidate_id=cid,
                run_id=run_id,
                target="cuda.sm90" if run_id == "run-a" else "cpu.x86_64",
                ok=ok,
                reason="" if ok else "compile_error",
                log="ok" if ok else "error: no member named 'x'",
                created_at=at(minute),
            )
        )
    for record in (
        evaluation("a1", "run-a", "cuda.h200", 1.0, 1.5),
        evaluation("a2", "run-a", "cuda.h200", 1.8, 2.5),
        evaluation("a4", "run-a", "cuda.h200", None, 4.5, "output_mismatch"),
        evaluation("b1", "run-b", "cpu.x86_64", 1.2, 61.5),
        evaluation("b2", "run-b", "cpu.x86_64", None, 62.5, "timeout"),
    ):
        await repository.save_evaluation(record)
    for snapshot in (
        ArchiveSnapshot(run_id="run-a", iteration=0, taken_at=at(10), cells=(cell("a1", 0, 1.0),)),
        ArchiveSnapshot(
            run_id="run-a",
            iteration=1,
            candidate_id="a2",
            outcome="new_cell",
            taken_at=at(11),
            cells=(cell("a1", 0, 1.0), cell("a2", 1, 1.8)),
        ),
        ArchiveSnapshot(
            run_id="run-a",
            iteration=1,
            taken_at=at(11.5),
            cells=(cell("a1", 0, 1.0), cell("a2", 1, 1.8), cell("a3", 2, 0.5)),
        ),
        ArchiveSnapshot(
            run_id="run-a",
            iteration=2,
            taken_at=at(12),
            cells=(cell("a1", 0, 1.0), cell("a2", 1, 1.8), cell("a3", 2, 0.5)),
        ),
    ):
        await repository.save_snapshot(snapshot)
    for usage_id, run_id, generator, prompt, completion, cost in (
        ("u1", "run-a", "openai", 100, 40, 0.25),
        ("u2", "run-a", "openai", 200, 60, 0.5),
        ("u3", "run-a", "heuristic", 0, 0, 0.0),
        ("u4", "run-b", "openai", 10, 5, 0.125),
    ):
        await repository.save_usage(
            UsageRecord(
                usage_id=usage_id,
                run_id=run_id,
                generator=generator,
                prompt_tokens=prompt,
                completion_tokens=completion,
                cost_usd=cost,
                recorded_at=at(5),
            )
        )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoreServer]:
    with StoreServer(tmp_path_factory.mktemp("store") / "lineage.db", fill) as server:
        yield server


@pytest.fixture
def empty_store(tmp_path: Path) -> Iterator[StoreServer]:
    with StoreServer(tmp_path / "empty.db") as server:
        yield server


def kf(*args: str) -> Any:
    return CliRunner().invoke(app, ["lineage", *args])


def kf_json(store: StoreServer, *args: str) -> Any:
    result = kf(*args, "--address", store.address, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def assert_clean_exit(result: Any, code: int) -> None:
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output


# ---- every subcommand, --json ----


def test_runs_lists_every_run_newest_first(store: StoreServer) -> None:
    doc = kf_json(store, "runs")
    assert [r["run_id"] for r in doc["runs"]] == ["run-b", "run-a"]
    run_a = doc["runs"][1]
    assert run_a["status"] == "finished"
    assert run_a["config"] == {"iterations": 2, "population": 4}
    assert run_a["created_at"] == at(0).isoformat()
    assert run_a["finished_at"] == at(30).isoformat()
    assert doc["runs"][0]["finished_at"] is None


def test_runs_filters_by_status_task_and_limit(store: StoreServer) -> None:
    assert [r["run_id"] for r in kf_json(store, "runs", "--status", "running")["runs"]] == ["run-b"]
    assert [r["run_id"] for r in kf_json(store, "runs", "--task", "matmul")["runs"]] == ["run-a"]
    assert [r["run_id"] for r in kf_json(store, "runs", "--limit", "1")["runs"]] == ["run-b"]


def test_show_counts_candidates_evaluations_and_failures(store: StoreServer) -> None:
    doc = kf_json(store, "show", "run-a")
    assert doc["run"]["task_name"] == "matmul"
    assert doc["run"]["summary"] == {"best_speedup": 1.8}
    assert doc["counts"] == {
        "candidates": 4,
        "builds": 4,
        "builds_failed": 1,
        "evaluations": 3,
        "evaluations_correct": 2,
        "failures": 2,
    }
    assert sorted((f["stage"], f["reason"], f["count"]) for f in doc["failures"]) == [
        ("build", "compile_error", 1),
        ("evaluation", "output_mismatch", 1),
    ]
    best = doc["best"]  # by the one definition: fastest kernel over the run's pooled eager median
    assert (best["candidate_id"], best["hardware"], best["retimed"]) == ("a2", "cuda.h200", False)
    assert best["speedup"] == pytest.approx(1.8) and best["runtime_ms"] == pytest.approx(2.0 / 1.8)
    assert best["eager_ms"] == pytest.approx(2.0) and best["eager_outliers_ms"] == []


def test_tree_gives_ancestors_and_descendants_with_depths(store: StoreServer) -> None:
    doc = kf_json(store, "tree", "a2")
    assert doc["root"]["candidate_id"] == "a2"
    assert [(n["candidate_id"], n["depth"]) for n in doc["ancestors"]] == [("a1", 1)]
    assert [(n["candidate_id"], n["depth"], n["parent_ids"]) for n in doc["descendants"]] == [
        ("a4", 1, ["a2", "a3"])
    ]
    from_root = kf_json(store, "tree", "a1")
    assert [(n["candidate_id"], n["depth"]) for n in from_root["descendants"]] == [
        ("a2", 1),
        ("a3", 1),
        ("a4", 2),
    ]


def test_tree_max_depth_cuts_the_walk(store: StoreServer) -> None:
    doc = kf_json(store, "tree", "a1", "--max-depth", "1")
    assert [n["candidate_id"] for n in doc["descendants"]] == ["a2", "a3"]


def test_best_gives_the_best_correct_kernel_per_task_and_hardware(store: StoreServer) -> None:
    doc = kf_json(store, "best")
    assert [(k["task_name"], k["hardware"], k["candidate_id"], k["speedup"]) for k in doc["kernels"]] == [
        ("matmul", "cuda.h200", "a2", pytest.approx(1.8)),
        ("softmax", "cpu.x86_64", "b1", pytest.approx(1.2)),
    ]
    only = kf_json(store, "best", "--task", "softmax", "--hardware", "cpu.x86_64")
    assert [k["candidate_id"] for k in only["kernels"]] == ["b1"]
    assert kf_json(store, "best", "--hardware", "cuda.b200")["kernels"] == []


def test_snapshots_give_cells_filled_and_best_speedup_per_iteration(store: StoreServer) -> None:
    doc = kf_json(store, "snapshots", "run-a")
    assert doc["snapshots"] == 4
    # iteration 1 has an update after a2 and the archive at its end: the row shows the end
    assert [
        (r["iteration"], r["cells_filled"], r["best_speedup"], r["best_candidate_id"])
        for r in doc["iterations"]
    ] == [(0, 1, 1.0, "a1"), (1, 3, 1.8, "a2"), (2, 3, 1.8, "a2")]
    assert kf_json(store, "snapshots", "run-b")["iterations"] == []


def test_failures_across_all_runs_and_for_one_run(store: StoreServer) -> None:
    everything = kf_json(store, "failures")
    assert everything["run_id"] is None
    assert sorted((f["stage"], f["reason"], f["count"]) for f in everything["failures"]) == [
        ("build", "compile_error", 1),
        ("evaluation", "output_mismatch", 1),
        ("evaluation", "timeout", 1),
    ]
    run_b = kf_json(store, "failures", "--run", "run-b")
    assert run_b["failures"] == [{"stage": "evaluation", "reason": "timeout", "count": 1}]


def test_usage_totals_by_generator_and_by_run(store: StoreServer) -> None:
    by_generator = kf_json(store, "usage")
    assert by_generator["group_by"] == "generator"
    assert [
        (t["key"], t["requests"], t["prompt_tokens"], t["completion_tokens"]) for t in by_generator["totals"]
    ] == [
        ("heuristic", 1, 0, 0),
        ("openai", 3, 310, 105),
    ]
    assert by_generator["totals"][1]["cost_usd"] == pytest.approx(0.875)
    by_run = kf_json(store, "usage", "--group-by", "run")
    assert [(t["key"], t["requests"]) for t in by_run["totals"]] == [("run-a", 3), ("run-b", 1)]
    one_run = kf_json(store, "usage", "--run", "run-b")
    assert [(t["key"], t["cost_usd"]) for t in one_run["totals"]] == [("openai", 0.125)]


def test_a_run_s_history_carries_its_usage_records_for_resume(store: StoreServer) -> None:
    async def history() -> list[tuple[str, str, int, int, float]]:
        client = LineageClient(store.address)
        try:
            found = await client.run_history("run-a")
        finally:
            await client.close()
        return [
            (u.usage_id, u.generator, u.prompt_tokens, u.completion_tokens, u.cost_usd) for u in found.usage
        ]

    assert sorted(asyncio.run(history())) == [
        ("u1", "openai", 100, 40, 0.25),
        ("u2", "openai", 200, 60, 0.5),
        ("u3", "heuristic", 0, 0, 0.0),
    ]


# ---- tables ----


def test_runs_table_names_each_run_and_its_status(store: StoreServer) -> None:
    result = kf("runs", "--address", store.address)
    assert result.exit_code == 0, result.output
    assert "run-a" in result.stdout and "run-b" in result.stdout
    assert "finished" in result.stdout and "running" in result.stdout
    assert not result.stdout.lstrip().startswith("{")


def test_tree_table_draws_parents_and_children(store: StoreServer) -> None:
    result = kf("tree", "a4", "--address", store.address)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any("ancestors" in line for line in lines)
    # a1 is the parent of both a2 and a3: drawn once in full, then marked as shown above
    assert sum("a1" in line for line in lines) == 2
    assert any("a1" in line and "shown above" in line for line in lines)


# ---- export and import ----


def test_export_then_import_into_an_empty_store_shows_the_same_run(
    store: StoreServer, empty_store: StoreServer, tmp_path: Path
) -> None:
    target = tmp_path / "a.kfrun.tar.gz"
    exported = kf_json(store, "export", "run-a", "-o", str(target))
    assert exported == {"run_id": "run-a", "path": str(target), "bytes": target.stat().st_size}
    assert target.stat().st_size > 0

    assert_clean_exit(kf("show", "run-a", "--address", empty_store.address), 1)
    imported = kf_json(empty_store, "import", str(target))
    assert imported == {"run_id": "run-a", "candidates": 4, "evaluations": 3}
    assert kf_json(empty_store, "show", "run-a") == kf_json(store, "show", "run-a")
    again = kf_json(empty_store, "import", str(target))
    assert (again["candidates"], again["evaluations"]) == (0, 0)


def test_export_names_the_file_as_the_server_does(
    store: StoreServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    doc = kf_json(store, "export", "run-b")
    assert doc["path"] == "run-b.kfrun.tar.gz"
    assert (tmp_path / "run-b.kfrun.tar.gz").stat().st_size == doc["bytes"]
    into_folder = kf_json(store, "export", "run-b", "-o", str(tmp_path))
    assert into_folder["path"] == str(tmp_path / "run-b.kfrun.tar.gz")


# ---- errors ----


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("args", [["runs"], ["show", "run-a"], ["import", __file__]])
def test_an_unreachable_api_is_named_and_exits_2(args: list[str]) -> None:
    address = f"127.0.0.1:{free_port()}"
    result = kf(*args, "--address", address)
    assert_clean_exit(result, 2)
    assert f"cannot reach the lineage API at {address}" in result.stderr


def test_the_address_comes_from_the_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    address = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("KF_STORE_GRPC_ADDRESS", address)
    result = kf("runs")
    assert_clean_exit(result, 2)
    assert address in result.stderr


@pytest.mark.parametrize(
    "args",
    [["show", "run-x"], ["snapshots", "run-x"], ["export", "run-x"], ["failures", "--run", "run-x"]],
)
def test_an_unknown_run_says_so_and_exits_1(store: StoreServer, args: list[str], tmp_path: Path) -> None:
    result = kf(*args, "--address", store.address)
    assert_clean_exit(result, 1)
    assert result.stderr.strip() == "no run run-x"
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_candidate_says_so_and_exits_1(store: StoreServer) -> None:
    result = kf("tree", "zz", "--address", store.address)
    assert_clean_exit(result, 1)
    assert result.stderr.strip() == "no candidate zz"


def test_a_corrupt_archive_gives_the_servers_reason_and_exits_2(
    empty_store: StoreServer, tmp_path: Path
) -> None:
    corrupt = tmp_path / "broken.kfrun.tar.gz"
    corrupt.write_bytes(b"\x1f\x8b not really a gzip stream")
    result = kf("import", str(corrupt), "--address", empty_store.address)
    assert_clean_exit(result, 2)
    assert result.stderr.startswith(f"cannot import {corrupt}: corrupt_archive")
    assert kf_json(empty_store, "runs")["runs"] == []


def test_an_archive_the_server_refuses_to_receive_exits_2_with_its_reason(
    empty_store: StoreServer, tmp_path: Path
) -> None:
    # gRPC servers accept 4 MiB per message unless configured otherwise
    big = tmp_path / "big.kfrun.tar.gz"
    big.write_bytes(b"\0" * (5 * 1024 * 1024))
    result = kf("import", str(big), "--address", empty_store.address)
    assert_clean_exit(result, 2)
    assert "RESOURCE_EXHAUSTED" in result.stderr
    assert empty_store.address in result.stderr
