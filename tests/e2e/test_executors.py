"""End to end: several executor processes on one machine share the work queue.

Two CPU executors (KF_CPU_EXECUTORS=2 on this host; one per GPU on a GPU host, as `up` starts them) take
candidates of two runs at once: each candidate is evaluated by exactly one of them, both do work, and
every evaluation record names the executor and device that produced it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from kernelfoundry.client import KernelFoundryClient
from kernelfoundry.stack.hardware import cpu_target
from kernelfoundry.stack.supervisor import Stack
from kernelfoundry.v1 import run_pb2

from .test_stack import FAST_ENV, chain_task, config, relu_task, wait_finished, wait_lineage_complete

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_two_executors_share_two_runs_and_no_candidate_is_evaluated_twice(tmp_path: Path) -> None:
    stack = Stack(state_dir=tmp_path / "stack", hardware=[cpu_target()], extra_env=FAST_ENV, cpu_executors=2)
    stack.start()
    client = KernelFoundryClient(stack.grpc_address)
    try:
        executors = stack.executor_services()
        assert len(executors) == 2 and all(e.alive() for e in executors)
        runs = [
            client.submit(chain_task(), config(iterations=1, population=3)),
            client.submit(relu_task(), config(iterations=1, population=3)),
        ]
        by_executor: Counter[str] = Counter()
        for run_id in runs:
            final = wait_finished(client, run_id, timeout_s=600)  # a loaded 2-core host is slow
            assert final.status == run_pb2.RUN_STATUS_COMPLETED, final.message
            candidates, evaluations, builds, _, _ = wait_lineage_complete(stack, run_id)
            evaluated = [e.candidate_id for e in evaluations]
            assert len(evaluated) == len(set(evaluated)), f"a candidate of {run_id} was evaluated twice"
            failed_builds = {b.candidate_id for b in builds if not b.ok}
            missing = {c.candidate_id for c in candidates} - set(evaluated) - failed_builds
            assert not missing, f"candidates of {run_id} never evaluated: {sorted(missing)}"
            for record in evaluations:
                executor = record.details["executor"]
                assert executor["device"] == "cpu"
                by_executor[executor["name"]] += 1
        print(f"evaluations per executor: {dict(by_executor)}")
        names = {e.name for e in executors}
        assert set(by_executor) == names, f"evaluations per executor: {dict(by_executor)}"
        for executor in executors:
            lines = [json.loads(x) for x in executor.log_path.read_text().splitlines() if x.startswith("{")]
            ready = [x for x in lines if x.get("event") == "executor ready"]
            assert ready and ready[0]["executor"] == executor.name and ready[0]["device"] == "cpu"
    finally:
        client.close()
        stack.stop()
