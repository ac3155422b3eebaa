"""The store's records decode a candidate's parameters by the tunables grammar's one integer rule."""

from __future__ import annotations

from kernelfoundry.services.store.records import candidate_record
from kernelfoundry.v1 import kernel_pb2, search_pb2


def test_candidate_params_are_integers_only_where_the_tunables_grammar_says_so() -> None:
    params = {"A": "-3", "B": "--3", "C": "010", "D": "\u00b2", "E": "float4", "F": "0"}
    event = search_pb2.CandidateCreated(
        candidate_id="c1",
        run_id="run-000000000001",
        source=kernel_pb2.KernelSource(language="cpp", code="// k\n", params=params),
    )
    record = candidate_record(event)
    assert dict(record.params) == {"A": -3, "B": "--3", "C": "010", "D": "\u00b2", "E": "float4", "F": 0}
