"""The llm service serving an ensemble: wired from KF_LLM_PROVIDERS on the in-memory bus, with a local
OpenAI-compatible server; outcomes credited to the member that wrote them; the heuristic fills in when
the provider is down; a finished run cancels its requests in flight; the meta-prompter's rewrite reaches
the kernel prompt and its tokens the request's usage."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Consumer, Delivery
from kernelfoundry.bus.memory import InMemoryBus
from kernelfoundry.bus.protocol import ConsumerSpec
from kernelfoundry.codec import kernel_from_proto, task_to_proto
from kernelfoundry.config import Settings
from kernelfoundry.domain.metaprompt import PITFALLS, Feedback
from kernelfoundry.services.llm.handlers import GenerateHandler, OutcomeHandler
from kernelfoundry.services.llm.main import make_ensemble, outcomes_durable, wire
from kernelfoundry.tasks.loading import load_task
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import run_pb2, search_pb2

from .chat_server import Answer, ChatServer, openai_body
from .test_providers import ANSWER, KEY


async def published_events(bus: InMemoryBus) -> list[search_pb2.CandidatesGenerated]:
    sub = await bus.subscribe(
        ConsumerSpec(
            stream=subjects.EVENTS_STREAM, durable="reader", filter_subjects=(subjects.CANDIDATES_GENERATED,)
        )
    )
    return [search_pb2.CandidatesGenerated.FromString(m.data) for m in await sub.fetch(100, timeout_s=0.2)]


ROOT = Path(__file__).resolve().parents[3]
TASK = load_task(ROOT / "tests" / "fixtures" / "kernels" / "tasks" / "fused_mul_add.py")
RUN = "run-00000000000a"
DELIVERY = Delivery(subject=subjects.generate("mix"), deliveries=1, stream_sequence=1)


def settings(url: str, **changes: Any) -> Settings:
    providers = [
        {
            "name": "local",
            "kind": "openai",
            "model": "test-model",
            "base_url": url,
            "api_key_env": "KF_TEST_LLM_KEY",
            "retries": 0,
        }
    ]
    fields: dict[str, Any] = {
        "generator": "mix",
        "llm_providers": json.dumps(providers),
        "llm_prices": '{"test-model": {"prompt": 1.0, "completion": 4.0}}',
        "llm_fallback": False,
    }
    fields.update(changes)
    return Settings(**fields)


def request(request_id: str, **changes: Any) -> search_pb2.GenerateCandidates:
    message = search_pb2.GenerateCandidates(
        request_id=request_id,
        run_id=RUN,
        task=task_to_proto(TASK),
        backend="cpu",
        count=1,
        seed=3,
        generator="mix",
    )
    for key, value in changes.items():
        if isinstance(value, dict):
            getattr(message, key).update(value)
        else:
            setattr(message, key, value)
    return message


async def run_consumers(consumers: list[Consumer[Any]], until: Any, timeout_s: float = 60.0) -> None:
    stop = asyncio.Event()
    tasks = [asyncio.create_task(c.run(stop)) for c in consumers]
    try:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not until():
            assert asyncio.get_running_loop().time() < deadline, [c.stats for c in consumers]
            await asyncio.sleep(0.02)
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def test_the_service_serves_the_ensemble_and_learns_from_outcomes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KF_TEST_LLM_KEY", KEY)
    bus = InMemoryBus()
    metrics = Metrics(process_collectors=False)
    with ChatServer([Answer(body=openai_body(ANSWER, 1000, 250))]) as server:
        parts = await wire(settings(server.url), bus, metrics)
        generate, outcomes = parts.consumers
        assert generate.spec.filter_subjects == (subjects.generate("mix"),) and generate.spec.concurrency == 8
        assert outcomes.spec.stream == subjects.EVENTS_STREAM and outcomes.spec.durable == outcomes_durable(
            "mix"
        )
        await bus.publish(subjects.generate("mix"), request(f"{RUN}-g0-r0"), "generate-1")
        await run_consumers([generate], lambda: generate.stats.handled == 1)
        [event] = await published_events(bus)
        archive = run_pb2.ArchiveUpdated(run_id=RUN, outcome="new_cell", candidate_id=f"{RUN}-g0-r0-c0")
        await bus.publish(subjects.ARCHIVE_UPDATED, archive, "archive-1")
        await run_consumers([outcomes], lambda: outcomes.stats.handled >= 1)
        for close in parts.closers:
            await close()
    assert server.seen[0].headers["authorization"] == f"Bearer {KEY}"
    assert event.generator == "local" and not event.error_reason
    [candidate] = event.candidates
    assert "kf_forward" in kernel_from_proto(candidate.source).code
    assert (event.usage.prompt_tokens, event.usage.completion_tokens) == (1000, 250)
    assert event.usage.cost_usd == pytest.approx((1000 * 1.0 + 250 * 4.0) / 1e6)
    sample = metrics.registry.get_sample_value
    assert sample("kf_generations_total", {"generator": "local", "outcome": "ok"}) == 1.0
    assert sample("kf_generation_tokens_total", {"generator": "local", "kind": "prompt"}) == 1000.0
    handler = outcomes.handler
    assert isinstance(handler, OutcomeHandler) and handler.ensemble is not None
    stats = handler.ensemble.members["local"].stats
    assert (stats.evaluated, stats.correct, stats.improvements) == (1, 1, 1)


async def test_the_heuristic_fills_in_while_the_provider_is_down() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from kernelfoundry.services.llm.isolation import GeneratorPool

    pool = GeneratorPool("heuristic")
    try:
        ensemble, _ = make_ensemble(
            settings(f"http://127.0.0.1:{port}/v1", llm_fallback=True), pool, environ={}
        )
        handler = GenerateHandler(ensemble)
        [out] = await handler(request(f"{RUN}-g0-r1"), DELIVERY)
    finally:
        await ensemble.close()
        pool.close()
    event = out.message
    assert event.generator == "heuristic" and event.candidates and not event.error_reason
    assert ensemble.members["local"].stats.provider_failures == 1


async def test_a_finished_run_cancels_its_requests_in_flight() -> None:
    with ChatServer([Answer(body=openai_body(ANSWER), delay_s=3.0)]) as server:
        ensemble, _ = make_ensemble(settings(server.url, llm_fallback=False), None, environ={})
        handler = GenerateHandler(ensemble)
        outcomes = OutcomeHandler(handler, ensemble)
        answer = asyncio.create_task(handler(request(f"{RUN}-g0-r2"), DELIVERY))
        while not server.seen:
            await asyncio.sleep(0.01)
        started = asyncio.get_running_loop().time()
        await outcomes(run_pb2.RunFinished(run_id=RUN, status=run_pb2.RUN_STATUS_STOPPED), DELIVERY)
        assert not answer.done()  # a stopped run may be resumed: its requests go on
        await outcomes(run_pb2.RunFinished(run_id=RUN, status=run_pb2.RUN_STATUS_CANCELLED), DELIVERY)
        [out] = await answer
        elapsed = asyncio.get_running_loop().time() - started
        [later] = await handler(request(f"{RUN}-g1-r0"), DELIVERY)
        await ensemble.close()
    assert out.message.error_reason == "cancelled" and elapsed < 1.0
    assert later.message.error_reason == "cancelled" and len(server.seen) == 1


async def test_the_meta_prompters_rewrite_reaches_the_prompt_and_its_tokens_are_booked_apart() -> None:
    rewrite = "```json\n" + json.dumps({PITFALLS: "- REWRITTEN: never read past n"}) + "\n```"

    def script(seen: Any) -> Answer:
        system = seen.body["messages"][0]["content"]
        if "guidance sections" in system:
            return Answer(body=openai_body(rewrite, 300, 40))
        return Answer(body=openai_body(ANSWER, 1000, 250))

    with ChatServer(script) as server:
        ensemble, meta = make_ensemble(settings(server.url, llm_meta_prompter="local"), None, environ={})
        assert meta is not None
        for i in range(4):
            meta.record(RUN, Feedback(0, "tiling", "failed:wrong_result", -1.0, f"max abs error {i}"))
        handler = GenerateHandler(ensemble, metaprompter=meta)
        message = request(f"{RUN}-g1-r3", prompt_variant_id="p1", guidance={PITFALLS: "- rules text"})
        [out] = await handler(message, DELIVERY)
        await ensemble.close()
    kernel_prompt = server.seen[-1].body["messages"][1]["content"]
    assert "- REWRITTEN: never read past n" in kernel_prompt and "- rules text" not in kernel_prompt
    usage, meta = out.message.usage, out.message.meta_usage
    assert (out.message.generator, usage.prompt_tokens, usage.completion_tokens) == ("local", 1000, 250)
    assert (out.message.meta_generator, meta.prompt_tokens, meta.completion_tokens) == (
        "local (meta-prompter)",
        300,
        40,
    )


def test_a_meta_prompter_must_name_a_chat_provider() -> None:
    with pytest.raises(ValueError, match="no chat provider"):
        make_ensemble(settings("http://127.0.0.1:9", llm_meta_prompter="nobody"), None, environ={})


async def test_a_repair_request_with_the_engines_repair_operator_is_served() -> None:
    from kernelfoundry.codec import kernel_to_proto
    from kernelfoundry.domain.kernel import KernelSource

    with ChatServer([Answer(body=openai_body(ANSWER))]) as server:
        ensemble, _ = make_ensemble(settings(server.url), None, environ={})
        message = request(f"{RUN}-g2-r0", mutation="repair", repair=True)
        message.parent.CopyFrom(
            search_pb2.ParentKernel(
                candidate_id=f"{RUN}-g1-r0-c0",
                source=kernel_to_proto(KernelSource("cpp", "int broken\n")),
                feedback="The previous kernel failed with reason `compile_error`.",
            )
        )
        [out] = await GenerateHandler(ensemble)(message, DELIVERY)
        await ensemble.close()
    assert out.message.candidates and not out.message.error_reason
    assert (out.message.mutation, out.message.repair) == ("repair", True)
    assert "compile_error" in server.seen[0].body["messages"][1]["content"]
