"""The failure event that ends the work a dead-lettered request stood for.

A request on a work subject (generate, compile, execute) that is dead-lettered — delivered too many times
because its workers kept dying on it, refused as malformed, or failing in its handler every time — would
otherwise leave its run waiting for a result that never comes, and its candidate without an evaluation in
the lineage. The consumer loop publishes, beside the dead letter, the result a worker publishes for a
failure, with the dead letter's reason code. It carries the message id a worker would have used, so a real
result published before (a worker killed after publishing, before acknowledging) wins by de-duplication.

Pure: no I/O, and nothing for messages that are not requests (an event dead-lettered by the store or the
evolver has no work to end).
"""

from __future__ import annotations

from google.protobuf.message import Message

from kernelfoundry.bus import subjects
from kernelfoundry.bus.protocol import Outgoing
from kernelfoundry.v1 import build_pb2, evaluation_pb2, search_pb2

MESSAGE_LIMIT = 4000


def failure_event(request: Message, reason: str, message: str) -> Outgoing | None:
    """The failure that ends `request`'s work, or None when `request` is not a work request."""
    text = f"dead-lettered ({reason}): {message}"[:MESSAGE_LIMIT]
    if isinstance(request, search_pb2.GenerateCandidates):
        generated = search_pb2.CandidatesGenerated(
            request_id=request.request_id,
            run_id=request.run_id,
            generator=request.generator,
            error_reason=reason,
            error_message=text,
            parent_id=request.parent.candidate_id,
            mutation=request.mutation,
            island=request.island,
            prompt_variant_id=request.prompt_variant_id,
            repair=request.repair,
            iteration=request.iteration,
        )
        return Outgoing(subjects.CANDIDATES_GENERATED, generated, f"generated-{request.request_id}")
    if isinstance(request, build_pb2.CompileCandidate):
        compiled = build_pb2.CandidateCompiled(
            candidate_id=request.candidate_id,
            run_id=request.run_id,
            ok=False,
            reason=reason,
            log=text,
            build_target=request.build_target,
        )
        return Outgoing(subjects.CANDIDATE_COMPILED, compiled, f"compiled-{request.candidate_id}")
    if isinstance(request, build_pb2.EvaluateCandidate):
        try:
            subject = subjects.evaluation_finished(request.hardware)
        except ValueError:  # not a request any compiler sent: there is no pool whose result it awaits
            return None
        evaluated = evaluation_pb2.EvaluationFinished(
            candidate_id=request.candidate_id,
            run_id=request.run_id,
            hardware=request.hardware,
            correct=False,
            reason=reason,
            message=text,
        )
        return Outgoing(subject, evaluated, f"evaluated-{request.candidate_id}")
    return None
