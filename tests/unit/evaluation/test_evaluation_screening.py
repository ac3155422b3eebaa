"""The screening rule and its settings."""

from __future__ import annotations

import pytest

from kernelfoundry.evaluation.screening import needs_full_protocol
from kernelfoundry.evaluation.settings import EvaluationSettings


def test_a_screen_within_the_margin_gets_the_full_protocol() -> None:
    assert needs_full_protocol(1.29, 1.0, 0.3)
    assert needs_full_protocol(1.30, 1.0, 0.3)
    assert not needs_full_protocol(1.31, 1.0, 0.3)
    assert needs_full_protocol(0.5, 1.0, 0.3)  # faster than the elite: certainly


def test_nothing_to_beat_means_the_full_protocol() -> None:
    assert needs_full_protocol(1e9, 0.0, 0.3)


def test_margins_per_backend_and_validation() -> None:
    assert EvaluationSettings().screen_margin_for("cuda") == 0.3
    assert EvaluationSettings().screen_margin_for("cpu") == 1.0
    assert EvaluationSettings(screen_margin=0.1).screen_margin_for("cpu") == 0.1
    with pytest.raises(ValueError, match="screen"):
        EvaluationSettings(screen_above_ms=-1.0)
    with pytest.raises(ValueError, match="screen"):
        EvaluationSettings(screen_margin=-0.5)
