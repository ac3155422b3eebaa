"""A whole CPU run on the embedded stack (JetStream and the five services as processes) with an ensemble
of the heuristic proposer and an OpenAI-compatible provider served by a local server that returns real
C++ kernels: correct ones, one that does not build, one that computes the wrong thing, one that cheats
(right on the first call only) and an answer without a kernel. The broken ones are recorded with their
reasons and repaired, the cheater is caught, the tokens and cost add up from the server's count to the
lineage and to the run's own summary, and the API key appears in no log, event, record or exported
report of the run."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kernelfoundry.client import KernelFoundryClient
from kernelfoundry.lineage.connection import open_repository
from kernelfoundry.lineage.export import export_run
from kernelfoundry.stack.hardware import cpu_target
from kernelfoundry.stack.supervisor import Stack
from kernelfoundry.tasks.loading import load_task
from kernelfoundry.v1 import run_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "generators"))
from chat_server import Answer, ChatServer, Seen, openai_body, openai_error

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++"),
]

ROOT = Path(__file__).resolve().parents[3]
KERNELS = ROOT / "tests" / "fixtures" / "kernels"
KEY = "sk-e2e-7c0d2b91f4a84e6b8d5f3a2c1b0e9d87"
PRICE_PROMPT, PRICE_COMPLETION = 3.0, 15.0  # USD per million tokens
# What catching the cheater may be called: it is right on the first call of a process only, so the
# evaluator sees it wrong on the later seeds, or on a checked timed call.
CHEAT_REASONS = {"correct_only_first_seed", "timed_run_wrong", "stale_output", "wrong_result"}
ROTATION: list[tuple[str | None, str]] = [
    ("syntax_error.cpp", "fused, unrolled"),
    ("wrong_sign.cpp", "fused, reordered"),
    ("good_fma.cpp", "one fused pass"),
    ("first_call_only.cpp", "fused, with a warm start"),
    (None, "I would need to know more about the hardware first."),
]
FAST_ENV = {
    "KF_TIMED_RUNS": "10",
    "KF_CORRECTNESS_TRIALS": "5",
    "KF_LOG_FORMAT": "json",
    "KF_ACK_WAIT_S": "6",
    "KF_HEARTBEAT_S": "2",
}


def unit(name: str, tag: str, n: int) -> str:
    """A planted unit without its `// expect:` line, made distinct by a constant (a run never evaluates
    the same code twice; comments do not make code different)."""
    lines = (KERNELS / "cpu" / name).read_text().splitlines()
    return "\n".join([f"// {tag}", *lines[1:], f"static const int kf_answer_{n} = {n};"]) + "\n"


def answer_text(code: str | None, rationale: str) -> str:
    if code is None:
        return rationale
    strategy = {"memory": 0, "algorithm": 1, "parallelism": 0, "rationale": rationale}
    return f"Here is the kernel.\n```cpp\n{code}```\n```json\n{json.dumps(strategy)}\n```\n"


class Model:
    """The local model: a rotation of kernels for new requests, a correct kernel for every repair, one
    429 first. Keeps what it was asked and the tokens it reported."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.kinds: list[str] = []
        self.throttled = False

    def __call__(self, seen: Seen) -> Answer:
        with self.lock:
            if not self.throttled:
                self.throttled = True
                return Answer(429, openai_error("Rate limit reached", "requests"), {"retry-after": "0"})
            self.calls += 1
            prompt = seen.body["messages"][1]["content"]
            if "## Repair this kernel" in prompt:
                kind, text = "repair", answer_text(unit("good_fma.cpp", "repaired", self.calls), "fixed it")
            else:
                name, rationale = ROTATION[(self.calls - 1) % len(ROTATION)]
                kind = name or "no_kernel"
                text = answer_text(unit(name, "answer", self.calls) if name else None, rationale)
            prompt_tokens = len(seen.body["messages"][0]["content"] + prompt) // 4
            completion_tokens = len(text) // 4
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens
            self.kinds.append(kind)
            return Answer(body=openai_body(text, prompt_tokens, completion_tokens))


def read_lineage(state_dir: Path, run_id: str, export_to: Path) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        repo = await open_repository(f"sqlite:///{state_dir / 'lineage.db'}")
        try:
            export_to.parent.mkdir(parents=True, exist_ok=True)
            await export_run(repo, run_id, export_to)
            return {
                "candidates": await repo.candidates_of_run(run_id),
                "builds": await repo.builds_of_run(run_id),
                "evaluations": await repo.evaluations_of_run(run_id),
                "usage": await repo.usage_of_run(run_id),
                "run": await repo.get_run(run_id),
            }
        finally:
            await repo.close()

    return asyncio.run(read())


def wait_recorded(state_dir: Path, run_id: str, export_to: Path, timeout_s: float = 120) -> dict[str, Any]:
    """The lineage once every candidate has its build failure or evaluation and the run is final."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = read_lineage(state_dir, run_id, export_to)
        ended = {b.candidate_id for b in found["builds"] if not b.ok}
        ended |= {e.candidate_id for e in found["evaluations"]}
        run = found["run"]
        candidates = {c.candidate_id for c in found["candidates"]}
        if run is not None and run.status != "running" and candidates <= ended:
            time.sleep(2.0)  # the last usage and event records land beside the run's end
            return read_lineage(state_dir, run_id, export_to)
        assert time.monotonic() < deadline, f"lineage incomplete: {len(candidates - ended)} open"
        time.sleep(1.0)


def test_a_cpu_run_with_an_llm_ensemble_records_repairs_catches_the_cheat_and_never_shows_the_key(
    tmp_path: Path,
) -> None:
    model = Model()
    providers = [
        {
            "name": "local",
            "kind": "openai",
            "base_url": "",
            "model": "local-coder",
            "api_key_env": "KF_E2E_LLM_KEY",
            "weight": 3,
            "backoff_s": 0.1,
        },
        {"name": "heuristic", "kind": "heuristic", "weight": 1},
    ]
    with ChatServer(model) as server:
        providers[0]["base_url"] = server.url + "/v1"
        env = {
            **FAST_ENV,
            "KF_GENERATOR": "mix",
            "KF_LLM_PROVIDERS": json.dumps(providers),
            "KF_LLM_PRICES": json.dumps(
                {"local-coder": {"prompt": PRICE_PROMPT, "completion": PRICE_COMPLETION}}
            ),
            "KF_LLM_SEEDER": "local",  # the four seeds are the rotation's first four kernels
            "KF_E2E_LLM_KEY": KEY,
            "KF_API_TLS": "false",  # the stack blanks it, and an empty value is not a boolean
        }
        stack = Stack(state_dir=tmp_path / "stack", hardware=[cpu_target()], extra_env=env)
        stack.start()
        try:
            client = KernelFoundryClient(stack.grpc_address)
            try:
                task = load_task(KERNELS / "tasks" / "fused_mul_add.py")
                config = run_pb2.RunConfig(
                    hardware=cpu_target().execute,
                    generator="mix",
                    iterations=4,
                    population=4,
                    sweeps=False,
                    seed=5,
                )
                run_id = client.submit(task, config)
                final = list(client.progress(run_id))[-1]
            finally:
                client.close()
            lineage = wait_recorded(stack.state_dir, run_id, tmp_path / "report" / f"{run_id}.tar.gz")
        finally:
            stack.stop()
    assert final.status == run_pb2.RUN_STATUS_COMPLETED, final.message
    assert final.candidates_correct >= 1

    candidates = {c.candidate_id: c for c in lineage["candidates"]}
    evaluations = {e.candidate_id: e for e in lineage["evaluations"]}
    failed_builds = {b.candidate_id: b for b in lineage["builds"] if not b.ok}
    by_generator = {c.generator for c in candidates.values()}
    assert "local" in by_generator, f"the provider wrote nothing: {model.kinds}"
    local = [c for c in candidates.values() if c.generator == "local"]

    def written_as(marker: str) -> list[str]:
        return [c.candidate_id for c in local if marker in c.code]

    # The kernel that does not build: recorded with its build failure and the compiler's message.
    broken = written_as("missing semicolon")
    assert broken, f"no unbuildable kernel reached the run: {model.kinds}"
    for cid in broken:
        assert cid in failed_builds and failed_builds[cid].reason == "compile_error"
        assert "error" in failed_builds[cid].log
    # The wrong one: its evaluation says so.
    wrong = written_as("a[i] * b[i] - a[i]")
    for cid in wrong:
        assert not evaluations[cid].correct and evaluations[cid].reason == "wrong_result"
    # The cheater: caught, never correct, never the best.
    cheats = written_as("static int calls")
    assert cheats, f"the cheating kernel did not reach the run: {model.kinds}"
    for cid in cheats:
        assert not evaluations[cid].correct and evaluations[cid].reason in CHEAT_REASONS, evaluations[cid]
    assert final.best.candidate_id and final.best.candidate_id not in cheats
    # Repairs: the failures came back to a generator with their feedback; the model's repairs are correct.
    repairs = [c for c in candidates.values() if c.repair_of]
    assert repairs, "no failed candidate was sent for repair"
    for c in repairs:
        if c.generator == "local":
            assert evaluations[c.candidate_id].correct, evaluations[c.candidate_id]
    assert "repair" in model.kinds or any(c.generator == "heuristic" for c in repairs)

    # Accounting: what the server reported is what the lineage holds, priced from the table.
    usage = [u for u in lineage["usage"] if u.generator == "local"]
    assert sum(u.prompt_tokens for u in usage) == model.prompt_tokens
    assert sum(u.completion_tokens for u in usage) == model.completion_tokens
    expected_cost = (model.prompt_tokens * PRICE_PROMPT + model.completion_tokens * PRICE_COMPLETION) / 1e6
    assert sum(u.cost_usd for u in usage) == pytest.approx(expected_cost, rel=1e-9)
    assert all(
        u.prompt_tokens == 0 and u.cost_usd == 0 for u in lineage["usage"] if u.generator == "heuristic"
    )
    assert len(server.seen) == model.calls + 1  # every answer counted, plus the one 429 that was retried
    # The run's own summary (its final progress) adds up to the lineage: in total and per generator.
    records = lineage["usage"]
    assert final.usage.requests == len(records)
    assert final.usage.prompt_tokens == sum(u.prompt_tokens for u in records) == model.prompt_tokens
    assert final.usage.completion_tokens == sum(u.completion_tokens for u in records)
    assert final.usage.cost_usd == pytest.approx(sum(u.cost_usd for u in records), rel=1e-9)
    assert set(final.usage_by_generator) == {u.generator for u in records}
    for name, totals in final.usage_by_generator.items():
        mine = [u for u in records if u.generator == name]
        assert (totals.requests, totals.prompt_tokens, totals.completion_tokens) == (
            len(mine),
            sum(u.prompt_tokens for u in mine),
            sum(u.completion_tokens for u in mine),
        )
        assert totals.cost_usd == pytest.approx(sum(u.cost_usd for u in mine), rel=1e-9)

    # The briefs the model read name the device; a mutation's states the parent's time beside the run's eager.
    briefs = [seen.body["messages"][1]["content"] for seen in server.seen]
    assert all(f"the run's hardware `{cpu_target().execute}`" in brief for brief in briefs)
    mutations = [brief for brief in briefs if "## Parent kernel" in brief]
    assert all("the run's PyTorch eager time" in brief for brief in mutations)

    # The key: in no log, event, record, stored kernel or exported report of the run.
    needles = [KEY.encode(), KEY[:12].encode(), KEY[-12:].encode()]
    searched: list[tuple[str, bytes]] = [
        (str(p), p.read_bytes()) for p in stack.state_dir.rglob("*") if p.is_file()
    ]
    with tarfile.open(tmp_path / "report" / f"{run_id}.tar.gz") as report:  # the exported run, unpacked
        for member in report.getmembers():
            extracted = report.extractfile(member) if member.isfile() else None
            if extracted is not None:
                searched.append((f"export:{member.name}", extracted.read()))
    for where, data in searched:
        for needle in needles:
            assert needle not in data, f"the key shows in {where}"
    assert len(searched) > 10 and any(w.startswith("export:") and "usage" in w for w, _ in searched)
    logs = "".join(p.read_text(errors="replace") for p in (stack.state_dir / "logs").glob("*.log"))
    assert '"serving an ensemble"' in logs or "serving an ensemble" in logs
    assert all(seen.headers["authorization"] == f"Bearer {KEY}" for seen in server.seen)
