"""What `kernelfoundry lineage` prints: source text shown verbatim, full width when piped, FILE argument,
errors as JSON with --json."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kernelfoundry.lineage import EvaluationRecord, LineageRepository, RunRecord
from tests.integration.cli.test_lineage_cli import kf
from tests.integration.lineage_server import StoreServer

LONG_LINE = "    # " + "a comment that is much longer than eighty columns, " * 3 + "END"
SOURCE = f"import torch\n\ndef get_inputs():\n{LONG_LINE}\n    return [torch.randn(4, 4)]\n"


async def fill(repository: LineageRepository) -> None:
    at = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    await repository.save_run(
        RunRecord(run_id="run-s", task_name="relu", task_source=SOURCE, hardware="cpu.x86_64", created_at=at)
    )
    for cid, runtime, eager in (("s1", 2.0, 8.0), ("s2", 1.0, 8.4), ("s3", 3.0, 30.0)):
        await repository.save_evaluation(
            EvaluationRecord(
                candidate_id=cid,
                run_id="run-s",
                hardware="cpu.x86_64",
                correct=True,
                runtime_ms=runtime,
                baseline_ms=eager,
                speedup=eager / runtime,
                evaluated_at=at,
            )
        )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoreServer]:
    with StoreServer(tmp_path_factory.mktemp("display") / "lineage.db", fill) as server:
        yield server


def test_show_prints_brackets_and_long_lines_of_the_source_whole_when_piped(store: StoreServer) -> None:
    result = kf("show", "run-s", "--address", store.address)
    assert result.exit_code == 0, result.output
    assert "return [torch.randn(4, 4)]" in result.stdout
    assert LONG_LINE.strip() in result.stdout  # one line: not cut or folded at 80 columns


def test_show_names_the_fastest_kernel_with_the_pooled_eager_figure(store: StoreServer) -> None:
    result = kf("show", "run-s", "--address", store.address, "--json")
    best = json.loads(result.stdout)["best"]
    assert best["candidate_id"] == "s2"  # 1.0 ms, although s3's own ratio (10x) is larger
    assert best["speedup"] == pytest.approx(8.4) and best["eager_samples"] == 3
    table = kf("show", "run-s", "--address", store.address).stdout
    assert "s2 on cpu.x86_64: 8.400x" in table


def test_export_writes_to_the_file_given_as_an_argument(store: StoreServer, tmp_path: Path) -> None:
    target = tmp_path / "s.kfrun.tar.gz"
    result = kf("export", "run-s", str(target), "--address", store.address, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["path"] == str(target) and target.stat().st_size > 0


def test_an_unknown_run_with_json_is_a_json_error(store: StoreServer) -> None:
    result = kf("show", "run-nope", "--address", store.address, "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout) == {"error": {"reason": "not_found", "message": "no run run-nope"}}
