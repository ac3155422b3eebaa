"""The event catalogue: which protobuf message each `kf.events.*` subject carries."""

from __future__ import annotations

from google.protobuf.message import Message

from kernelfoundry.bus import subjects
from kernelfoundry.v1 import build_pb2, evaluation_pb2, run_pb2, search_pb2

EVENT_TYPES: dict[str, type[Message]] = {
    subjects.RUN_SUBMITTED: run_pb2.RunSubmitted,
    subjects.RUN_FINISHED: run_pb2.RunFinished,
    subjects.CANDIDATES_GENERATED: search_pb2.CandidatesGenerated,
    subjects.CANDIDATE_CREATED: search_pb2.CandidateCreated,
    subjects.CANDIDATE_COMPILED: build_pb2.CandidateCompiled,
    subjects.EVALUATION_FINISHED: evaluation_pb2.EvaluationFinished,
    subjects.ARCHIVE_UPDATED: run_pb2.ArchiveUpdated,
}


def decode_event(subject: str, data: bytes) -> Message:
    """Decode an event by its subject; KeyError for a subject that carries no known event."""
    message = EVENT_TYPES[subject]()
    message.ParseFromString(data)
    return message
