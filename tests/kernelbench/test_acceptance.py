"""Acceptance: every KernelBench task of levels 1 and 2 (176 files) passes submission's validation.

The files are data outside the repository (`../shared/kernelbench` beside its root; see that folder's
README; `KF_KERNELBENCH` names another copy); without them these tests skip. Three depths:
  * real sizes, structure and memory: each task runs on the meta device at KernelBench's own sizes, and
    what one evaluation holds (with a float64 reference beside it) fits an H200;
  * reduced sizes, values, on the CPU: `kernelfoundry.tasks.scaling.reduced_sizes` shrinks each task
    keeping its structure, and the validation child's own code accepts it (in this process: 176 children
    would spend most of their time importing torch);
  * real sizes, values, on a GPU (skipped without one): the same, on the device the runs target.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from kernelfoundry.tasks.loading import load_task
from kernelfoundry.tasks.memory import GIB, run_on_meta
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.tasks.summary import DEPTH_VALUES, OUTPUT_CHECKS

# KF_KERNELBENCH names another copy (scripts/prepare_device_carry.sh makes one for the accelerator machine)
KERNELBENCH = Path(
    os.environ.get("KF_KERNELBENCH", Path(__file__).resolve().parents[2].parent / "shared" / "kernelbench")
)
FILES = sorted(KERNELBENCH.glob("level[12]/*.py"))
EXPECTED_TASKS = 176
H200_USABLE_BYTES = 139 * (1 << 30)  # what an H200 has free for one process (cudaMemGetInfo)

pytestmark = pytest.mark.skipif(not FILES, reason=f"KernelBench files not found at {KERNELBENCH}")


def task_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def test_all_176_tasks_are_here():
    assert len(FILES) == EXPECTED_TASKS
    assert {path.parent.name for path in FILES} == {"level1", "level2"}


@pytest.mark.parametrize("path", FILES, ids=task_id)
def test_at_real_size_the_task_runs_on_the_meta_device_and_fits_an_h200(path: Path):
    task = load_task(path)
    footprint = run_on_meta(task, task.shapes[0]).footprint
    assert footprint.need_bytes + footprint.wide_need_bytes <= H200_USABLE_BYTES, (
        f"{task_id(path)} needs {footprint.need_bytes / GIB:.1f} GiB "
        f"(+{footprint.wide_need_bytes / GIB:.1f} GiB for a float64 reference)"
    )


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread: the reduced tasks are small, and on a shared 2-core machine more threads thrash."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def reduced(path: Path) -> Task:
    scaling = pytest.importorskip("kernelfoundry.tasks.scaling")
    task = load_task(path)
    return replace(task, shapes=(ShapeVariant("reduced", scaling.reduced_sizes(task.reference_source)),))


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("path", FILES, ids=task_id)
def test_at_reduced_size_the_task_is_accepted_on_the_cpu(path: Path, monkeypatch: pytest.MonkeyPatch):
    from kernelfoundry.tasks import validation_child
    from kernelfoundry.tasks.validation_child import validate_in_process

    monkeypatch.setattr(validation_child, "TIMED_RUNS", 1)  # the runtime is for orientation only
    summary = validate_in_process(reduced(path), "cpu")
    (shape,) = summary["shapes"]
    assert shape["depth"] == DEPTH_VALUES
    assert shape["output_checks"] and all(c["policy"] in OUTPUT_CHECKS for c in shape["output_checks"])


@pytest.mark.gpu
@pytest.mark.parametrize("path", FILES, ids=task_id)
def test_at_real_size_the_task_is_accepted_on_the_gpu(path: Path, monkeypatch: pytest.MonkeyPatch):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from kernelfoundry.tasks import validation_child
    from kernelfoundry.tasks.validation_child import validate_in_process

    monkeypatch.setattr(validation_child, "TIMED_RUNS", 1)

    summary = validate_in_process(load_task(path), "cuda")
    assert summary["device"].startswith("cuda")
    assert all(shape["depth"] == DEPTH_VALUES for shape in summary["shapes"])
