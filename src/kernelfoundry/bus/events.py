"""The event catalogue: which protobuf message each `kf.events.*` subject carries."""

from __future__ import annotations

from google.protobuf.message import Message

from kernelfoundry.bus import subjects
from kernelfoundry.v1 import build_pb2, evaluation_pb2, run_pb2, search_pb2

EVENT_TYPES: dict[str, type[Message]] = {
    subjects.RUN_SUBMITTED: run_pb2.RunSubmitted,
    subjects.RUN_FINISHED: run_pb2.RunFinished,
    subjects.RUN_RESUMED: run_pb2.RunResumed,
    subjects.CANDIDATES_GENERATED: search_pb2.CandidatesGenerated,
    subjects.CANDIDATE_CREATED: search_pb2.CandidateCreated,
    subjects.CANDIDATE_COMPILED: build_pb2.CandidateCompiled,
    subjects.EVALUATION_FINISHED: evaluation_pb2.EvaluationFinished,
    subjects.ARCHIVE_UPDATED: run_pb2.ArchiveUpdated,
}


class ForeignResult(ValueError):
    """An evaluation result that names other hardware than the executor pool whose subject it came on."""


def decode_event(subject: str, data: bytes) -> Message:
    """Decode an event by its subject; KeyError for a subject that carries no known event. A result on an
    executor pool's subject (only that pool's NATS user may publish there) must name that pool's
    hardware: ForeignResult otherwise (a pool forging another's result)."""
    pool = subjects.result_hardware(subject)
    message = EVENT_TYPES[subjects.EVALUATION_FINISHED if pool is not None else subject]()
    message.ParseFromString(data)
    if pool is not None:
        assert isinstance(message, evaluation_pb2.EvaluationFinished)
        try:
            named = subjects.evaluation_finished(message.hardware)
        except ValueError:  # no or malformed hardware: not this pool's
            named = ""
        if named != subject:
            raise ForeignResult(
                f"result for {message.candidate_id!r} names hardware {message.hardware!r}"
                f" but came from the {pool!r} executors"
            )
    return message
