"""End to end: after real runs on the embedded stack, every series the Grafana dashboard queries has data.

The stack (a real JetStream server, the five services as processes, a CPU executor) generates with a
local OpenAI-compatible server (tokens and a price, so spend is counted) whose first kernel computes the
wrong thing (an evaluation failure) and whose later ones are right. It runs one small run whose evolver is
killed and restarted mid-run (the run resumes and completes), one run cancelled as soon as it is
submitted, and one undecodable work message (a healthy run dead-letters nothing, and the dead-letter
panels need a letter). Then every running service's /metrics is scraped, as Prometheus would, and each
series selector of every panel and variable of deploy/grafana/kernelfoundry.json must match a sample:
with observations for histograms, above zero for counters, present for gauges, and carrying the labels
the query groups by. The selectors that cannot have data on this stack are listed in NO_DATA_HERE with the
reason; nothing is skipped silently, and an entry no panel needs fails the test. On a GPU host a CUDA run
fills those that only want a GPU (NEEDS_A_GPU), and a second test checks them.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kernelfoundry.bus import subjects
from kernelfoundry.client import KernelFoundryClient
from kernelfoundry.stack.hardware import cpu_target, cuda_targets
from kernelfoundry.stack.supervisor import ServiceProcess, Stack
from kernelfoundry.tasks.loading import load_task
from kernelfoundry.telemetry.metrics import ALL_METRICS
from kernelfoundry.v1 import run_pb2

from .test_recovery import poll_run, wait_final
from .test_stack import FAST_ENV, ROOT, chain_task

sys.path.insert(0, str(ROOT / "tests" / "unit" / "generators"))
from chat_server import Answer, ChatServer, Seen, openai_body

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DASHBOARD = ROOT / "deploy" / "grafana" / "kernelfoundry.json"
KERNELS = ROOT / "tests" / "fixtures" / "kernels"
GENERATOR = "mix"
PRICE_PROMPT, PRICE_COMPLETION = 3.0, 15.0  # USD per million tokens
# Dashboard variables as "All" selects them (allValue).
VARIABLES = {"task": ".*", "hardware": ".*"}

SELECTOR = re.compile(r"\b((?:kf|jetstream)_[a-z0-9_]+)\b\s*(\{[^}]*\})?")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*\"([^\"]*)\"")
GROUPING = re.compile(r"\bby\s*\(([^)]*)\)")
LABEL_VALUES = re.compile(r"label_values\(\s*[a-z0-9_]+\s*,\s*([a-zA-Z_]+)\s*\)")
# The labels each series name carries in telemetry/metrics.py (not those Prometheus adds: le, pod, ...).
OWN_LABELS = {name: frozenset(spec.labels) for spec in ALL_METRICS for name in spec.sample_names()}

# Selectors that no service of the CPU stack can give data, with the reason: (metric name or prefix ending
# in "_", a matcher the selector has or None) -> why. A GPU host fills those of NEEDS_A_GPU (checked there).
NEEDS_A_GPU: dict[tuple[str, tuple[str, str, str] | None], str] = {
    ("kf_executor_busy_seconds_total", ("device", "=~", "cuda.*")): (
        "GPU utilisation: this stack runs a CPU executor only"
    ),
    ("kf_run_median_seconds", ("kind", "=", "torch_compile")): (
        "torch.compile is timed on CUDA by default and off on CPU (KF_TORCH_COMPILE_BASELINE unset), where "
        "each evaluation's compile takes seconds"
    ),
}
NO_DATA_HERE: dict[tuple[str, tuple[str, str, str] | None], str] = {
    ("jetstream_", None): "the NATS exporter's JetStream series: the embedded stack runs no exporter",
    **NEEDS_A_GPU,
}
GPUS = cuda_targets()


@dataclass(frozen=True)
class Selector:
    """A series selector, with the metric's own labels its query groups by (a panel's legend): a sample
    with data must carry each of them, or the panel's series collapse into one without a name."""

    metric: str
    matchers: tuple[tuple[str, str, str], ...]
    grouped: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        for name, op, value in self.matchers:
            actual = labels.get(name, "")
            if op == "=" and actual != value:
                return False
            if op == "!=" and actual == value:
                return False
            if op == "=~" and not re.fullmatch(value, actual):
                return False
            if op == "!~" and re.fullmatch(value, actual):
                return False
        return True

    def __str__(self) -> str:
        inside = ", ".join(f'{name}{op}"{value}"' for name, op, value in self.matchers)
        text = f"{self.metric}{{{inside}}}" if inside else self.metric
        return f"{text} by ({', '.join(self.grouped)})" if self.grouped else text


@dataclass(frozen=True)
class Sample:
    service: str
    name: str
    labels: dict[str, str]
    value: float


class Model:
    """The local model: a kernel computing the wrong thing first, right ones (each distinct) after.
    Counts the tokens it reports."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def __call__(self, seen: Seen) -> Answer:
        with self.lock:
            self.calls += 1
            name = "wrong_sign.cpp" if self.calls == 1 else "good_fma.cpp"
            lines = (KERNELS / "cpu" / name).read_text().splitlines()[1:]  # without its `// expect:`
            code = "\n".join([*lines, f"static const int kf_answer_{self.calls} = {self.calls};"]) + "\n"
            strategy = {"memory": 0, "algorithm": 1, "parallelism": 0, "rationale": "one fused pass"}
            text = f"Here is the kernel.\n```cpp\n{code}```\n```json\n{json.dumps(strategy)}\n```\n"
            prompt_tokens = sum(len(m["content"]) for m in seen.body["messages"]) // 4
            completion_tokens = len(text) // 4
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens
            return Answer(body=openai_body(text, prompt_tokens, completion_tokens))


def substitute(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)
    return expr


def selectors(expr: str) -> list[Selector]:
    """The series selectors of a PromQL expression (metric name, label matchers and the labels of its
    own the query groups by), variables set."""
    expr = substitute(expr)
    groups = [label.strip() for g in GROUPING.findall(expr) for label in g.split(",")]
    groups += LABEL_VALUES.findall(expr)
    found = []
    for metric, braces in SELECTOR.findall(expr):
        own = OWN_LABELS.get(metric, frozenset())
        grouped = tuple(sorted({label for label in groups if label in own}))
        found.append(Selector(metric, tuple(MATCHER.findall(braces or "")), grouped))
    return found


def dashboard_queries() -> dict[str, list[str]]:
    """Each panel's (and variable's) queries, by title."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries: dict[str, list[str]] = {}
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            queries[f"panel {panel['title']!r}"] = [t["expr"] for t in panel["targets"]]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            queries[f"variable {variable['name']!r}"] = [variable["definition"]]
    return queries


def no_data_reason(selector: Selector) -> str | None:
    for (metric, matcher), reason in NO_DATA_HERE.items():
        named = selector.metric.startswith(metric) if metric.endswith("_") else selector.metric == metric
        if named and (matcher is None or matcher in selector.matchers):
            return reason
    return None


def has_data(selector: Selector, samples: list[Sample]) -> bool:
    """A matching sample carrying the grouped labels: observed, for a histogram's series; above zero, for
    a counter; present, for a gauge."""
    matching = [
        s
        for s in samples
        if s.name == selector.metric
        and selector.matches(s.labels)
        and all(s.labels.get(label) for label in selector.grouped)
    ]
    if selector.metric.endswith(("_bucket", "_count", "_sum", "_total")):
        return any(s.value > 0 for s in matching)
    return bool(matching)


def missing_data(samples: list[Sample]) -> list[str]:
    """'where: selector' for every dashboard selector without data and without a reason to have none."""
    missing: list[str] = []
    for where, exprs in dashboard_queries().items():
        for expr in exprs:
            for selector in selectors(expr):
                if no_data_reason(selector) is None and not has_data(selector, samples):
                    missing.append(f"{where}: {selector}")
    return sorted(set(missing))


def metrics_port(service: ServiceProcess) -> int:
    """The /metrics port the service's latest start logged."""
    ports = [
        json.loads(line)["metrics_port"]
        for line in service.log_path.read_text(errors="replace").splitlines()
        if line.startswith("{") and '"service started"' in line
    ]
    assert ports, f"{service.name} logged no start"
    return int(ports[-1])


def scrape(stack: Stack) -> list[Sample]:
    """Every sample of every running service's /metrics."""
    samples: list[Sample] = []
    for name, service in stack.services.items():
        assert service.alive(), f"{name} is not running"
        url = f"http://127.0.0.1:{metrics_port(service)}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        for family in text_string_to_metric_families(text):
            samples += [Sample(name, s.name, dict(s.labels), s.value) for s in family.samples]
    return samples


def publish_undecodable(stack: Stack, subject: str) -> None:
    """One message no consumer can decode (a length-delimited field cut short) on a work subject."""

    async def publish() -> None:
        nc = await nats.connect(stack.nats_url, connect_timeout=5, max_reconnect_attempts=0)
        try:
            await nc.jetstream(timeout=10).publish(subject, b"\x0a\xff\x01")
        finally:
            await nc.close()

    asyncio.run(publish())


def values(samples: list[Sample], name: str, service: str, **labels: str) -> list[float]:
    return [
        s.value
        for s in samples
        if s.name == name and s.service == service and all(s.labels.get(k) == v for k, v in labels.items())
    ]


@pytest.fixture
def model() -> Iterator[tuple[Model, ChatServer]]:
    model = Model()
    with ChatServer(model) as server:
        yield model, server


@pytest.fixture
def stack(tmp_path: Path, model: tuple[Model, ChatServer]) -> Iterator[Stack]:
    _, server = model
    provider = {"name": "local", "kind": "openai", "base_url": f"{server.url}/v1", "model": "local-coder"}
    env = {
        **FAST_ENV,
        "KF_GENERATOR": GENERATOR,
        "KF_LLM_PROVIDERS": json.dumps([provider]),
        "KF_LLM_PRICES": json.dumps(
            {"local-coder": {"prompt": PRICE_PROMPT, "completion": PRICE_COMPLETION}}
        ),
    }
    stack = Stack(state_dir=tmp_path / "stack", hardware=[cpu_target()], extra_env=env)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


def config(iterations: int) -> run_pb2.RunConfig:
    return run_pb2.RunConfig(
        hardware=cpu_target().execute,
        generator=GENERATOR,
        iterations=iterations,
        population=2,
        sweeps=False,
        seed=1,
    )


def test_every_dashboard_series_has_data_after_a_resumed_run_a_cancelled_run_and_a_dead_letter(
    stack: Stack, model: tuple[Model, ChatServer]
) -> None:
    task = load_task(KERNELS / "tasks" / "fused_mul_add.py")
    client = KernelFoundryClient(stack.grpc_address)
    try:
        publish_undecodable(stack, subjects.compile_(cpu_target().build))
        resumed = client.submit(task, config(iterations=1))
        deadline = time.monotonic() + 120
        while client.get_run(resumed).candidates_generated < 1:
            assert time.monotonic() < deadline, "no candidate was generated"
            time.sleep(0.1)
        evolver = stack.service("evolver")
        evolver.kill()
        evolver.start()
        poll_run(client, resumed)
        cancelled = client.submit(task, config(iterations=1))
        assert client.cancel(cancelled).status == run_pb2.RUN_STATUS_CANCELLED
        final = wait_final(client, resumed)
        assert final.status == run_pb2.RUN_STATUS_COMPLETED, final.message
        assert final.candidates_failed >= 1, "the wrong kernel was not evaluated"

        # the compiler's dead letter and the queue-lag samples may trail the run's end by an interval
        deadline = time.monotonic() + 30
        while missing := missing_data(samples := scrape(stack)):
            if time.monotonic() > deadline:
                break
            time.sleep(1.0)
        assert not missing, "dashboard series without data after the runs:\n" + "\n".join(missing)

        # the run gauges stay true across the restart, the resume and the cancel
        assert values(samples, "kf_runs_active", "evolver") == [0.0]
        assert values(samples, "kf_runs_total", "evolver", status="completed") == [1.0]
        assert values(samples, "kf_runs_total", "evolver", status="cancelled") == [1.0]
        speedup = values(samples, "kf_kernel_speedup", "evolver", task=final.task_name)
        assert speedup == [pytest.approx(final.speedup.speedup, rel=1e-9)]
        # the generator's counters come from the model's answers (the cancelled run's request may have
        # been dropped in flight after the model counted it) and the spend is their price
        llm, _ = model
        prompt = sum(values(samples, "kf_generation_tokens_total", "llm", kind="prompt"))
        completion = sum(values(samples, "kf_generation_tokens_total", "llm", kind="completion"))
        assert 0 < prompt <= llm.prompt_tokens and 0 < completion <= llm.completion_tokens
        cost = (prompt * PRICE_PROMPT + completion * PRICE_COMPLETION) / 1e6
        assert sum(values(samples, "kf_generation_cost_usd_total", "llm")) == pytest.approx(cost, rel=1e-9)
    finally:
        client.close()


@pytest.mark.gpu
@pytest.mark.skipif(not GPUS, reason="needs a GPU (nvidia-smi lists none)")
def test_on_a_gpu_host_the_gpu_series_have_data(tmp_path: Path) -> None:
    """What the CPU test lets go for want of a GPU: a CUDA run fills it (busy share of a cuda:<index>
    device, the torch.compile median CUDA executors time by default)."""
    target = GPUS[0]
    stack = Stack(
        state_dir=tmp_path / "stack",
        hardware=[cpu_target(), target],
        extra_env=FAST_ENV,
        cpu_executors=0,
        gpu_executors=1,
    )
    stack.start()
    client = KernelFoundryClient(stack.grpc_address)
    try:
        config = run_pb2.RunConfig(hardware=target.execute, iterations=1, population=2, sweeps=False, seed=1)
        final = wait_final(client, client.submit(chain_task(), config))
        assert final.status == run_pb2.RUN_STATUS_COMPLETED, final.message
        gpu_selectors = {
            f"{where}: {selector}": selector
            for where, exprs in dashboard_queries().items()
            for expr in exprs
            for selector in selectors(expr)
            if no_data_reason(selector) in NEEDS_A_GPU.values()
        }
        assert gpu_selectors
        deadline = time.monotonic() + 30
        samples = scrape(stack)
        while missing := [k for k, sel in gpu_selectors.items() if not has_data(sel, samples)]:
            if time.monotonic() > deadline:
                break
            time.sleep(1.0)
            samples = scrape(stack)
        assert not missing, "GPU series without data after a CUDA run:\n" + "\n".join(missing)
    finally:
        client.close()
        stack.stop()


def test_every_exception_is_used_by_a_dashboard_query() -> None:
    used = [selector for exprs in dashboard_queries().values() for e in exprs for selector in selectors(e)]
    for key, reason in NO_DATA_HERE.items():
        assert any(no_data_reason(s) == reason for s in used), f"no dashboard query needs {key}"


def test_selectors_are_read_with_their_matchers_and_the_variables_set() -> None:
    (selector,) = selectors(
        'sum by (le, task, pod) (rate(kf_run_speedup_bucket{task=~"$task", kind!="x"}[$__range]))'
    )
    assert selector == Selector(
        "kf_run_speedup_bucket", (("task", "=~", ".*"), ("kind", "!=", "x")), grouped=("task",)
    )
    assert selector.matches({"task": "relu", "kind": "y"})
    assert not selector.matches({"task": "relu", "kind": "x"})
    assert not Selector("m", (("device", "=~", "cuda.*"),)).matches({"device": "cpu"})
    assert Selector("m", (("device", "!~", "cuda.*"),)).matches({})
    counted_zero = [Sample("s", "kf_runs_total", {"status": "completed"}, 0.0)]
    assert not has_data(Selector("kf_runs_total", ()), counted_zero)
    assert not has_data(Selector("kf_compile_duration_seconds_count", ()), [])
    assert has_data(Selector("kf_runs_active", ()), [Sample("s", "kf_runs_active", {}, 0.0)])
    unnamed = [Sample("s", "kf_kernel_speedup", {"task": "", "hardware": "cpu.x86_64"}, 2.0)]
    assert has_data(Selector("kf_kernel_speedup", ()), unnamed)
    assert not has_data(Selector("kf_kernel_speedup", (), grouped=("task",)), unnamed)
    (variable,) = selectors("label_values(kf_kernel_speedup, task)")
    assert variable.grouped == ("task",)
