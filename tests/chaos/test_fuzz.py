"""The fuzz campaigns at CI size: 200 gRPC cases and 200 bus messages against the embedded stack.

Seeded (the gRPC cases are the same every time; the bus messages are the same kinds on the same subjects,
built from the legitimate run's recorded traffic). A few minutes on two cores, mostly the legitimate runs
that go through the stack beside the fuzzing. The full campaigns are bench/fuzz_grpc.py and
bench/fuzz_bus.py (10,000 each).
"""

from __future__ import annotations

import pytest

from .bus_fuzz import BusFuzzSettings, run_bus_campaign
from .grpc_fuzz import GrpcFuzzSettings, methods, run_grpc_campaign

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_200_grpc_cases_on_every_method_leave_every_service_serving_and_no_run_behind() -> None:
    # seed 27: every method, two archives sent to ImportRun, two streams cancelled mid-way. Hostile task
    # texts are the bench's (one that loops costs the 120 s validation deadline; the hole they found has
    # its own test, tests/unit/services/test_llm_untrusted_reference.py)
    report = run_grpc_campaign(GrpcFuzzSettings(seed=27, cases=200, settle_s=600.0), say=print)
    assert report.problems() == []
    fuzzed = {o.case.method.name for o in report.campaign.outcomes}
    assert fuzzed == {m.name for m in methods()}
    codes = {o.code.name for o in report.campaign.outcomes}
    assert "INVALID_ARGUMENT" in codes and "OK" in codes
    assert report.legit_status == "RUN_STATUS_COMPLETED"
    assert {"archive", "cancel_stream"} <= set(report.campaign.kinds())


def test_200_poison_duplicate_and_reordered_bus_messages_are_dead_lettered_or_absorbed() -> None:
    settings = BusFuzzSettings(seed=18, messages=200, legit_runs=1, later_run=False, settle_s=600.0)
    report = run_bus_campaign(settings, say=print)
    assert report.problems() == []
    assert report.settled and report.work_left == 0
    assert set(report.legit_runs.values()) == {"finished"}
    assert sum(sum(c.values()) for c in report.dead_letters.values()) > 0
    assert report.restart_ok
