"""Running a candidate's Python glue: the `kf` object it calls its compiled units through.

The glue is executed as a fresh module whose globals hold `torch`, `nn`, `F` and `kf`, where
`kf.launch(entry, inputs, outputs)` calls entry point `entry` of the candidate's unit with `inputs`
(tensors or Python scalars) and `outputs` (tensors the unit must write completely), on the evaluation's
stream. Outputs given to kf.launch are poisoned right before the call, so they are write-only for the
unit. Runs only in the untrusted runner process, after glue_checks passed. Never exposes the reference.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import Any

from kernelfoundry.evaluation.reasons import GLUE_ERROR, EvaluationFailure
from kernelfoundry.evaluation.unit import CompiledUnit, DescriptorArray, as_tensors

GLUE_MODULE_NAME = "kf_candidate_glue"


class KernelLauncher:
    """The `kf` object injected into the glue."""

    def __init__(
        self, unit: CompiledUnit, stream_handle: Callable[[], int | None], poison: Callable[[Any], None]
    ) -> None:
        self._unit = unit
        self._stream_handle = stream_handle
        self._poison = poison
        self.launches = 0
        # Correctness trials poison every output before each launch; timed runs do not, so that a glue
        # candidate is not charged an extra write pass per launch that a direct unit is not.
        self.poisoning = True

    def launch(self, entry: str, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        """Call `entry` on `inputs`, writing `outputs`; raises on a non-zero return (kernel_error)."""
        import torch

        device = next((t.device for t in [*inputs, *outputs] if isinstance(t, torch.Tensor)), None)
        tensors_in = as_tensors(inputs, device)
        if self.poisoning:
            for out in outputs:
                self._poison(out)
        self.launches += 1
        self._unit.call(
            entry, DescriptorArray(tensors_in), DescriptorArray(list(outputs)), self._stream_handle()
        )


def load_glue(glue: str, launcher: KernelLauncher) -> type:
    """Execute the glue and return its `ModelNew` class."""
    import torch
    from torch import nn
    from torch.nn import functional

    module = types.ModuleType(GLUE_MODULE_NAME)
    module.__dict__.update({"torch": torch, "nn": nn, "F": functional, "kf": launcher})
    try:
        exec(compile(glue, f"<{GLUE_MODULE_NAME}>", "exec"), module.__dict__)
    except Exception as exc:
        raise EvaluationFailure(GLUE_ERROR, f"glue failed to import: {type(exc).__name__}: {exc}") from exc
    model_new = module.__dict__.get("ModelNew")
    if not isinstance(model_new, type):
        raise EvaluationFailure(GLUE_ERROR, "glue defines no class `ModelNew`")
    return model_new


def build_model_new(model_new_cls: type, init_inputs: Sequence[Any], reference: Any, device: str) -> Any:
    """Instantiate ModelNew with the reference's init inputs and the reference's weights (by name)."""
    import torch

    try:
        torch.manual_seed(0)
        model = model_new_cls(*init_inputs)
        model = model.to(device).eval()
    except EvaluationFailure:
        raise
    except Exception as exc:
        raise EvaluationFailure(
            GLUE_ERROR, f"ModelNew(*init_inputs) failed: {type(exc).__name__}: {exc}"
        ) from exc
    reference_state = reference.state_dict()
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            source = reference_state.get(name)
            if source is not None and source.shape == tensor.shape:
                tensor.copy_(source)
    return model
