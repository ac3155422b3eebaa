"""Drawn input sets (staged devices): the runner draws each set from the judge's seed where it
computes, and what it drew fingerprints the same as the judge's own draw; a refresh writes the new
seed's values into the tensors the candidate already holds; a changed input is noticed."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelfoundry.evaluation import comparison, reasons
from kernelfoundry.evaluation.backends.cpu import CpuRunnerDevice
from kernelfoundry.evaluation.reasons import EvaluationFailure
from kernelfoundry.evaluation.runner import Runner
from kernelfoundry.tasks.model import ShapeVariant
from kernelfoundry.tasks.reference import draw_inputs, load_reference_module

torch = pytest.importorskip("torch")
SOURCE = (
    Path(__file__).resolve().parents[2] / "fixtures" / "kernels" / "tasks" / "fused_mul_add.py"
).read_text()
WITH_SCALAR = SOURCE.replace("return [torch.randn(N), torch.randn(N)]", "return [torch.randn(N), 0.5]")
SHAPE = ShapeVariant("n64", {"N": 64})


def bound_runner(source: str, seeds: list[int], items: list[list[dict]]) -> tuple[Runner, dict]:
    runner = Runner(CpuRunnerDevice("cpu"), staged=True)
    draw = {"source": source, "overrides": dict(SHAPE.overrides), "shape_name": SHAPE.name, "seeds": seeds}
    binding = runner._draw_sets(draw, items)
    return runner, {"draws": binding[0], "sets": binding[1], "seeds": binding[2]}


def judge_draw(source: str, seed: int) -> list:
    return draw_inputs(load_reference_module(source, SHAPE.overrides), SHAPE, seed)


TENSOR = {"drawn": {"dtype": "float32", "shape": [64]}}


def test_the_runners_draws_fingerprint_like_the_judges() -> None:
    _, drawn = bound_runner(SOURCE, [11, 12], [[TENSOR, TENSOR], [TENSOR, TENSOR]])
    for seed, values in zip([11, 12], drawn["sets"], strict=True):
        judge = judge_draw(SOURCE, seed)
        assert [comparison.content_digest(v) for v in values] == [comparison.content_digest(v) for v in judge]
    assert comparison.content_digest(drawn["sets"][0][0]) != comparison.content_digest(drawn["sets"][1][0])


def test_scalars_keep_the_judges_value_and_a_set_that_does_not_fit_is_left_empty() -> None:
    _, drawn = bound_runner(WITH_SCALAR, [5, 6], [[TENSOR, {"scalar": 0.5}], [TENSOR, TENSOR]])
    assert drawn["sets"][0][1] == 0.5
    assert drawn["sets"][1] == []  # described as two tensors, drawn as a tensor and a number


def test_a_source_that_does_not_load_leaves_every_set_empty() -> None:
    _, drawn = bound_runner("raise RuntimeError('no')", [1], [[TENSOR]])
    assert drawn["sets"] == [[]] and drawn["draws"] is None


def test_a_refresh_writes_the_new_seeds_values_in_place_and_a_change_is_noticed() -> None:
    from kernelfoundry.evaluation.runner import Binding

    runner, drawn = bound_runner(SOURCE, [21, 22], [[TENSOR, TENSOR], [TENSOR, TENSOR]])
    binding = Binding([], drawn["sets"], [], [], [], draws=drawn["draws"], seeds=drawn["seeds"])
    pointer = binding.sets[1][0].data_ptr()
    runner._redraw(binding, 1, 99)
    assert binding.sets[1][0].data_ptr() == pointer
    assert comparison.bitwise_equal(binding.sets[1][0], judge_draw(SOURCE, 99)[0])
    runner._check_inputs_intact(binding, 1)  # untouched: no failure
    binding.sets[1][1].add_(1.0)
    with pytest.raises(EvaluationFailure) as caught:
        runner._check_inputs_intact(binding, 1)
    assert caught.value.reason == reasons.INPUT_MODIFIED


def test_a_large_drawn_set_is_checked_by_its_digests_as_drawn_without_a_redraw(monkeypatch) -> None:
    """A drawn set of LARGE_BYTES or more is not drawn again to be compared (that took the set's
    size again in device memory): its tensors' digests, kept from the draw and from every refresh,
    must still match."""
    from kernelfoundry.evaluation import runner as runner_module
    from kernelfoundry.evaluation.runner import Binding

    monkeypatch.setattr(runner_module, "LARGE_BYTES", 0)
    runner, drawn = bound_runner(SOURCE, [31, 32], [[TENSOR, TENSOR], [TENSOR, TENSOR]])
    digests = [[comparison.content_digest(v) for v in s] for s in drawn["sets"]]
    binding = Binding(
        [], drawn["sets"], [], [], [], draws=drawn["draws"], seeds=drawn["seeds"], digests=digests
    )
    runner._redraw(binding, 0, 77)
    assert binding.digests[0] == [comparison.content_digest(v) for v in judge_draw(SOURCE, 77)]

    def no_redraw(*_: object) -> list:
        raise AssertionError("a large set is not drawn again for the check")

    monkeypatch.setattr(runner, "_drawn", no_redraw)
    runner._check_inputs_intact(binding, 0)  # untouched: no failure
    binding.sets[0][1].mul_(-1.0)
    with pytest.raises(EvaluationFailure) as caught:
        runner._check_inputs_intact(binding, 0)
    assert caught.value.reason == reasons.INPUT_MODIFIED and "digest" in caught.value.message


def test_a_staged_set_is_compared_with_the_judges_host_copy_slice_by_slice(monkeypatch) -> None:
    """Staged from the judge's host memory: the device copy is compared with it slice by slice (never a
    whole second copy on the device)."""
    from kernelfoundry.evaluation.runner import Binding

    monkeypatch.setattr(comparison, "CHUNK_ELEMENTS", 4)  # 32-byte slices: 8 of a 64-float input
    runner = Runner(CpuRunnerDevice("cpu"), staged=True)
    host = [torch.randn(64), torch.randn(64)]
    binding = Binding([host], [[t.clone() for t in host]], [], [], [])
    runner._check_inputs_intact(binding, 0)
    binding.sets[0][0][63] += 1.0  # in the last slice
    with pytest.raises(EvaluationFailure) as caught:
        runner._check_inputs_intact(binding, 0)
    assert caught.value.reason == reasons.INPUT_MODIFIED
