"""A staged trial reads the outputs on the candidate's stream and again after the device-wide
synchronise: a change between the two is work left running outside the stream (async_side_stream). Below
LARGE_BYTES the runner keeps a copy of what it read; from it on, only the digest's sums (a copy of a
6.4 GB output beside the judge on an 80 GB card did not fit). Run here on the CPU, with a device whose
synchronise lands the late work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kernelfoundry.evaluation import comparison, reasons
from kernelfoundry.evaluation import runner as runner_module
from kernelfoundry.evaluation.backends.cpu import CpuRunnerDevice
from kernelfoundry.evaluation.reasons import EvaluationFailure
from kernelfoundry.evaluation.runner import Binding, Runner

torch = pytest.importorskip("torch")


class LateWorkDevice(CpuRunnerDevice):
    """The candidate's work outside the stream lands when the device-wide synchronise waits for it."""

    def __init__(self) -> None:
        super().__init__("cpu")
        self.late: Callable[[], None] | None = None

    def synchronize(self) -> None:
        if self.late is not None:
            self.late()
            self.late = None


class Unit:
    launches = 0


class Doubling(torch.nn.Module):
    def forward(self, x: Any) -> Any:
        return x * 2.0


def trial(late: Callable[[Any], None] | None, monkeypatch: pytest.MonkeyPatch, large: bool) -> list[str]:
    """One trial call of a glue candidate whose output `late` changes at the synchronise; the kinds of
    snapshot the runner took."""
    monkeypatch.setattr(runner_module, "LARGE_BYTES", 0 if large else 1 << 40)
    taken: list[str] = []
    digest_sums = comparison.digest_sums
    monkeypatch.setattr(comparison, "digest_sums", lambda value: taken.append("digest") or digest_sums(value))
    device = LateWorkDevice()
    runner = Runner(device, staged=True)
    runner.unit = Unit()
    x = torch.randn(4096)
    binding = Binding([[x]], [[x.clone()]], [], [torch.empty(4096)], [torch.empty(4096)], model=Doubling())
    runner.shapes[0] = binding
    outputs: list[Any] = []
    original = binding.model.forward

    def forward(value: Any) -> Any:
        out = original(value)
        outputs.append(out)
        if late is not None:
            device.late = lambda: late(out)
        return out

    binding.model.forward = forward
    runner.call({"shape": 0, "set": 0, "trial": True}, [])
    return taken


@pytest.mark.parametrize("large", [False, True], ids=["copied", "digested"])
def test_a_trial_passes_when_nothing_changes_after_the_call(large: bool, monkeypatch) -> None:
    taken = trial(None, monkeypatch, large)
    # the intact-inputs check digests nothing here (staged, not drawn): every digest is an output's
    assert taken == (["digest", "digest"] if large else [])


@pytest.mark.parametrize("large", [False, True], ids=["copied", "digested"])
def test_an_output_changed_after_the_call_fails_the_trial(large: bool, monkeypatch) -> None:
    def late(out: Any) -> None:
        out[4095] += 1.0  # one value of the last slice, as a side stream finishing late would write it

    monkeypatch.setattr(comparison, "CHUNK_ELEMENTS", 1000)  # several slices of digest sums
    with pytest.raises(EvaluationFailure) as caught:
        trial(late, monkeypatch, large)
    assert caught.value.reason == reasons.ASYNC_SIDE_STREAM


def test_the_digest_sums_differ_where_the_bytes_do_and_fold_into_the_content_digest(monkeypatch) -> None:
    monkeypatch.setattr(comparison, "CHUNK_ELEMENTS", 6)
    value = torch.randn(50)
    sums = comparison.digest_sums(value)
    assert sums.shape == (9, 2) and sums.dtype == torch.int64  # 50 words in slices of 6
    total, odd = (int(v) for v in sums.sum(dim=0))
    assert comparison.content_digest(value) == (total * 1_000_003 + odd) % (1 << 62)
    for i in (0, 25, 49):
        changed = value.clone()
        changed[i] = -changed[i]
        assert not comparison.digest_sums(changed).equal(sums)
    assert comparison.digest_sums(torch.empty(0)).shape == (0, 2)
    assert comparison.content_digest(torch.empty(0)) == 0


def test_an_exception_of_the_evaluators_own_code_names_where_it_was_raised() -> None:
    """A glue error's message names the line that raised it, so an error in the runner's own code (its
    name undefined when run as a script) is not read as every candidate's."""

    def call_a_helper_missing_at_run_time() -> None:
        raise NameError("name '_snapshot' is not defined")

    try:
        call_a_helper_missing_at_run_time()
    except NameError as exc:
        failure = reasons.classify_exception(exc, "the candidate")
    assert failure.reason == reasons.GLUE_ERROR
    assert failure.message.startswith("the candidate raised NameError: name '_snapshot' is not defined (at ")
    assert "test_evaluation_side_stream_snapshot.py:" in failure.message
    assert failure.message.endswith(" in call_a_helper_missing_at_run_time)")
    bare = reasons.classify_exception(ValueError("no traceback"), "the candidate")
    assert bare.message == "the candidate raised ValueError: no traceback"
