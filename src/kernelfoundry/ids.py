"""Run identifiers: made by the server, in one format, checked by one pattern wherever they are accepted.

The server makes `run-` and 12 hex digits. What it accepts (`RUN_ID`) is `run-` and 1 to 32 lowercase
letters or digits: every id the server ever made, ids of archives from other deployments, and nothing
that could name a path, a subject wildcard or another key. The same pattern is declared on every run_id
field in protos/ (buf.validate), and import checks archives against it. Anything that reaches a file name,
a NATS subject or a database key is derived from an id that matched it.
"""

from __future__ import annotations

import re
import uuid

RUN_ID = re.compile(r"run-[a-z0-9]{1,32}")
# Candidate ids are derived from run ids by the evolver (`<run>-g3-r1-c0`, `<run>-init0`); an archive's
# may come from another deployment, so the rule is a safe token, not the evolver's exact shape.
CANDIDATE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,159}")


def new_run_id() -> str:
    return f"run-{uuid.uuid4().hex[:12]}"


def is_run_id(value: str) -> bool:
    return RUN_ID.fullmatch(value) is not None


def is_candidate_id(value: str) -> bool:
    return CANDIDATE_ID.fullmatch(value) is not None
