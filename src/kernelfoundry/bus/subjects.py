"""Subject names. Work subjects carry the hardware: adding a machine type is configuration, not code."""

from __future__ import annotations

WORK_STREAM = "KF_WORK"
EVENTS_STREAM = "KF_EVENTS"
DEADLETTER_STREAM = "KF_DEADLETTER"
ARTIFACT_BUCKET = "kf-artifacts"

GENERATE_PREFIX = "kf.generate"
COMPILE_PREFIX = "kf.compile"
EXECUTE_PREFIX = "kf.execute"
EVENTS_PREFIX = "kf.events"
DEADLETTER_PREFIX = "kf.deadletter"

RUN_SUBMITTED = "kf.events.run.submitted"
RUN_FINISHED = "kf.events.run.finished"
RUN_RESUMED = "kf.events.run.resumed"
CANDIDATES_GENERATED = "kf.events.generation.finished"
CANDIDATE_CREATED = "kf.events.candidate.created"
CANDIDATE_COMPILED = "kf.events.compile.finished"
# Evaluation results travel on their executor pool's own subject, `kf.events.evaluation.finished.<hardware>`,
# which only that pool's NATS user may publish to (kernelfoundry.bus.permissions); the bare subject is
# what results were published on before, still decoded when the history is replayed.
EVALUATION_FINISHED = "kf.events.evaluation.finished"
EVALUATION_FINISHED_ANY = f"{EVALUATION_FINISHED}.>"
ARCHIVE_UPDATED = "kf.events.archive.updated"


def _token(value: str) -> str:
    token = value.strip().lower()
    if not token or any(c in token for c in " *>\t"):
        raise ValueError(f"invalid subject token {value!r}")
    return token


def generate(generator: str) -> str:
    return f"{GENERATE_PREFIX}.{_token(generator)}"


def compile_(hardware: str) -> str:
    """`cpu.x86_64` -> `kf.compile.cpu.x86_64`."""
    return f"{COMPILE_PREFIX}.{_hardware(hardware)}"


def execute(hardware: str) -> str:
    """`cuda.h200` -> `kf.execute.cuda.h200`."""
    return f"{EXECUTE_PREFIX}.{_hardware(hardware)}"


def evaluation_finished(hardware: str) -> str:
    """`cuda.h200` -> `kf.events.evaluation.finished.cuda.h200`: the results of that executor pool."""
    return f"{EVALUATION_FINISHED}.{_hardware(hardware)}"


def is_evaluation_finished(subject: str) -> bool:
    return subject == EVALUATION_FINISHED or subject.startswith(EVALUATION_FINISHED + ".")


def result_hardware(subject: str) -> str | None:
    """The executor pool a result subject belongs to (None for the bare, pool-less subject)."""
    if not subject.startswith(EVALUATION_FINISHED + "."):
        return None
    return subject[len(EVALUATION_FINISHED) + 1 :]


def deadletter(subject: str) -> str:
    return f"{DEADLETTER_PREFIX}.{subject}"


def _hardware(hardware: str) -> str:
    parts = hardware.split(".")
    if len(parts) != 2:
        raise ValueError(f"hardware must be <backend>.<arch-or-device>, e.g. cpu.x86_64, got {hardware!r}")
    return ".".join(_token(p) for p in parts)
