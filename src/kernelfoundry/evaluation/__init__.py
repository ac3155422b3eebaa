"""The evaluation engine: correctness, anti-cheat checks and timing of one compiled candidate.

Public API: EvaluationSettings, EvaluationRequest, EvaluationReport, EvaluationWorker, evaluate_once,
check_glue and the reason codes in `reasons`. Importing this package never imports torch (the child
process does); it never imports transport code either (the executor service adapts it to NATS).
"""

from kernelfoundry.evaluation import reasons
from kernelfoundry.evaluation.glue_checks import GlueFinding, check_glue
from kernelfoundry.evaluation.reasons import EvaluationFailure
from kernelfoundry.evaluation.report import EvaluationReport, ShapeReport
from kernelfoundry.evaluation.settings import EvaluationRequest, EvaluationSettings
from kernelfoundry.evaluation.worker import EvaluationWorker, evaluate_once

__all__ = [
    "EvaluationFailure",
    "EvaluationReport",
    "EvaluationRequest",
    "EvaluationSettings",
    "EvaluationWorker",
    "GlueFinding",
    "ShapeReport",
    "check_glue",
    "evaluate_once",
    "reasons",
]
