"""`kernelfoundry report` as a command: where it reads the run from, where it writes, and how it fails.

The run comes from the real LineageApi over a SQLite store (served from a background event loop, as the
store serves it) or from an archive file that store exported; mistakes end in one line and an exit code.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelfoundry.cli.main import app
from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.lineage import (
    ArchiveSnapshot,
    BuildRecord,
    CandidateRecord,
    EvaluationRecord,
    LineageRepository,
    RunRecord,
)
from kernelfoundry.lineage.export import export_run_bytes
from kernelfoundry.report import SECTIONS
from kernelfoundry.stack.supervisor import free_port
from tests.integration.lineage_server import StoreServer

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
RUN = "run-c0ffee"


async def fill(repository: LineageRepository) -> None:
    await repository.save_run(
        RunRecord(
            run_id=RUN,
            task_name="relu",
            hardware="cpu.x86_64",
            status="finished",
            created_at=T0,
            finished_at=T0 + timedelta(minutes=3),
        )
    )
    for i, (cid, parents, runtime) in enumerate(
        ((f"{RUN}-init0", (), 4.0), (f"{RUN}-g1-c0", (f"{RUN}-init0",), 2.0))
    ):
        await repository.save_candidate(
            CandidateRecord(
                candidate_id=cid,
                run_id=RUN,
                parent_ids=parents,
                iteration=i,
                code=f'// {cid}\nextern "C" int kf_forward() {{ return 0; }}\n',
                analysed=Descriptors(i, 0, 0),
                mutation="vectorize" if parents else "",
                created_at=T0 + timedelta(seconds=i),
            )
        )
        await repository.save_build(
            BuildRecord(candidate_id=cid, run_id=RUN, target="cpu.x86_64", ok=True, created_at=T0)
        )
        await repository.save_evaluation(
            EvaluationRecord(
                candidate_id=cid,
                run_id=RUN,
                hardware="cpu.x86_64",
                correct=True,
                runtime_ms=runtime,
                baseline_ms=8.0,
                compile_baseline_ms=6.0,
                evaluated_at=T0 + timedelta(seconds=10 + i),
            )
        )
        await repository.save_snapshot(
            ArchiveSnapshot(
                run_id=RUN,
                iteration=i,
                taken_at=T0 + timedelta(seconds=20 + i),
                cells=tuple(
                    {"memory": j, "algorithm": 0, "parallelism": 0, "candidate_id": c, "speedup": 8.0 / r}
                    for j, (c, r) in enumerate(((f"{RUN}-init0", 4.0), (f"{RUN}-g1-c0", 2.0))[: i + 1])
                ),
            )
        )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoreServer]:
    with StoreServer(tmp_path_factory.mktemp("store") / "lineage.db", fill) as server:
        yield server


@pytest.fixture(scope="module")
def exported(store: StoreServer) -> bytes:
    """The run's archive, as `kernelfoundry lineage export` writes it."""
    archive, _ = store.call(export_run_bytes(store.repository, RUN))
    return archive


def report(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["report", *args])


def assert_clean_exit(result, code: int) -> None:  # type: ignore[no-untyped-def]
    """Exit `code`; a failure through typer.Exit (a message, never an exception's traceback)."""
    assert result.exit_code == code, result.output
    assert result.exception is None if code == 0 else isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output


def test_a_run_from_the_api_is_written_to_the_named_file(store: StoreServer, tmp_path: Path) -> None:
    target = tmp_path / "out.html"
    result = report(RUN, "--address", store.address, "-o", str(target))
    assert_clean_exit(result, 0)
    assert f"wrote the report of run {RUN} to {target}" in result.output
    html = target.read_text()
    assert all(f'<section id="{s}">' in html for s in SECTIONS)
    assert '<div class="headline">4.00x</div>' in html  # 8 ms eager over the 2 ms kernel


def test_a_folder_as_output_gets_the_run_s_file_name(store: StoreServer, tmp_path: Path) -> None:
    assert_clean_exit(report(RUN, "--address", store.address, "-o", str(tmp_path)), 0)
    assert (tmp_path / f"{RUN}.report.html").is_file()


def test_an_exported_archive_renders_without_a_store(
    store: StoreServer, exported: bytes, tmp_path: Path
) -> None:
    archive = tmp_path / "run.kfrun.tar.gz"
    archive.write_bytes(exported)
    offline = tmp_path / "offline.html"
    assert_clean_exit(report("--archive", str(archive), "-o", str(offline)), 0)
    online = tmp_path / "online.html"
    assert_clean_exit(report(RUN, "--address", store.address, "-o", str(online)), 0)
    assert offline.read_text() == online.read_text()


def test_an_unknown_run_exits_1(store: StoreServer, tmp_path: Path) -> None:
    result = report("run-0", "--address", store.address, "-o", str(tmp_path / "x.html"))
    assert_clean_exit(result, 1)
    assert "no run run-0" in result.output
    assert not (tmp_path / "x.html").exists()


def test_an_unreachable_store_exits_2(tmp_path: Path) -> None:
    result = report(RUN, "--address", f"127.0.0.1:{free_port()}", "-o", str(tmp_path / "x.html"))
    assert_clean_exit(result, 2)
    assert "cannot reach the lineage API" in result.output


def test_an_archive_of_another_run_or_no_run_at_all_exits_2(
    store: StoreServer, exported: bytes, tmp_path: Path
) -> None:
    archive = tmp_path / "run.kfrun.tar.gz"
    archive.write_bytes(exported)
    result = report("run-other", "--archive", str(archive), "-o", str(tmp_path / "x.html"))
    assert_clean_exit(result, 2)
    assert f"holds run {RUN}, not run-other" in result.output
    assert_clean_exit(report("-o", str(tmp_path / "x.html")), 2)
    corrupt = tmp_path / "corrupt.tar.gz"
    corrupt.write_bytes(b"not a gzip")
    result = report("--archive", str(corrupt), "-o", str(tmp_path / "x.html"))
    assert_clean_exit(result, 2)
    assert "not a readable lineage archive" in result.output
    assert not (tmp_path / "x.html").exists()
