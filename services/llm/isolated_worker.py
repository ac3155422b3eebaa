"""The sandboxed worker of services/llm/isolation.py: answers generation requests for one task.

Reads GenerateCandidates frames on stdin and writes CandidatesGenerated frames on its own copy of
stdout; file descriptor 1 itself goes to the log with stderr, so whatever the task's code prints cannot
break the framing. Started as `python -m kernelfoundry.services.llm.isolated_worker GENERATOR`.
"""

from __future__ import annotations

import asyncio
import os
import sys

from kernelfoundry.services.llm.handlers import _event_for, produce_event, request_from_proto
from kernelfoundry.services.llm.isolation import read_frame, write_frame
from kernelfoundry.tasks.model import TaskError
from kernelfoundry.v1 import search_pb2


def main(argv: list[str]) -> int:
    from kernelfoundry.services.llm.main import make_generator

    if len(argv) != 2:
        print("usage: isolated_worker GENERATOR", file=sys.stderr)
        return 2
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    generator = make_generator(argv[1])
    while True:
        data = read_frame(0, None)
        if data is None:
            return 0
        message = search_pb2.GenerateCandidates.FromString(data)
        try:
            request = request_from_proto(message)
        except (TaskError, ValueError) as exc:
            event = _event_for(message, generator.name)
            event.error_reason = "bad_request"
            event.error_message = str(exc)[:4000]
        else:
            event = asyncio.run(produce_event(generator, message, request))
        write_frame(answers, event.SerializeToString())


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
