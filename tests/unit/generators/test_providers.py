"""The OpenAI-compatible and Anthropic providers against local servers speaking their wire formats."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from typing import Any

import pytest

from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.generators.accounting import PriceTable
from kernelfoundry.generators.base import GenerationRequest, ParentKernel
from kernelfoundry.generators.providers.transport import RateLimiter, Secret, redact, retry_after_seconds
from kernelfoundry.generators.registry import ProviderSpec, build, parse_specs
from kernelfoundry.tasks.model import Task

from .chat_server import (
    Answer,
    ChatServer,
    anthropic_body,
    anthropic_error,
    openai_body,
    openai_error,
)

KEY = "sk-test-4f1c9a77b2e84d0e9c3a5b6d7e8f9012"
REFERENCE = """import torch
from torch import nn


class Model(nn.Module):
    def forward(self, a, b):
        return a * b + a


def get_inputs():
    return [torch.randn(4096), torch.randn(4096)]


def get_init_inputs():
    return []
"""
KERNEL = """#include <stdint.h>
#include "kf_abi.h"

KF_DEFINE_ABI_VERSION()

// @kf.tunable CHUNK in [64, 256] default 256
#ifndef CHUNK
#define CHUNK 256
#endif

KF_EXPORT int kf_forward(const kf_tensor* in, int32_t n_in, kf_tensor* out, int32_t n_out, void* stream) {
  const float* a = KF_DATA(const float, &in[0]);
  const float* b = KF_DATA(const float, &in[1]);
  float* y = KF_DATA(float, &out[0]);
  const int64_t n = kf_numel(&out[0]);
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i] + a[i];
  return KF_OK;
}
"""
ANSWER = (
    "Here is a fused kernel.\n```cpp\n" + KERNEL + "```\n"
    '```json\n{"memory": 1, "algorithm": 1, "parallelism": 0, "rationale": "one fused pass"}\n```\n'
)
PRICES = PriceTable.from_json('{"test-model": {"prompt": 2.0, "completion": 8.0}}')


def request(**overrides: Any) -> GenerationRequest:
    fields: dict[str, Any] = {
        "request_id": "req-1",
        "task": Task("fused_mul_add", REFERENCE),
        "backend": "cpu",
        "seed": 7,
    }
    fields.update(overrides)
    return GenerationRequest(**fields)


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def provider(kind: str, url: str, sleep: Sleeps | None = None, **spec: Any) -> Any:
    fields: dict[str, Any] = {"name": f"{kind}-test", "kind": kind, "model": "test-model", "base_url": url}
    fields.update(spec)
    environ = {"TEST_KEY": KEY}
    fields.setdefault("api_key_env", "TEST_KEY")
    options: dict[str, Any] = {"sleep": sleep} if sleep is not None else {}
    return build(ProviderSpec(**fields), prices=PRICES, environ=environ, **options)


async def test_openai_compatible_request_shape_and_parsed_kernel() -> None:
    with ChatServer([Answer(body=openai_body(ANSWER, 1000, 500))]) as server:
        gen = provider("openai", server.url + "/v1")
        result = await gen.generate(request())
        await gen.close()
    seen = server.seen[0]
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.headers["content-type"] == "application/json"
    assert seen.body["model"] == "test-model"
    assert [m["role"] for m in seen.body["messages"]] == ["system", "user"]
    assert "return a * b + a" in seen.body["messages"][1]["content"]
    assert seen.body["seed"] == 7 and seen.body["max_tokens"] == 8192
    assert not result.error, result.message
    (candidate,) = result.candidates
    assert candidate.source.language == "cpp" and "kf_forward" in candidate.source.code
    assert [t.name for t in candidate.source.tunables] == ["CHUNK"]
    assert candidate.strategy == Descriptors(memory=1, algorithm=1, parallelism=0)
    assert candidate.rationale == "one fused pass"
    assert candidate.mutation == "seed"
    assert result.generator == "openai-test"
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (1000, 500)
    assert result.usage.cost_usd == pytest.approx((1000 * 2.0 + 500 * 8.0) / 1e6)


async def test_anthropic_request_shape_and_parsed_kernel() -> None:
    with ChatServer([Answer(body=anthropic_body(ANSWER, 300, 200))]) as server:
        gen = provider("anthropic", server.url)
        result = await gen.generate(request())
        await gen.close()
    seen = server.seen[0]
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == KEY
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in seen.headers
    assert seen.body["model"] == "test-model" and seen.body["max_tokens"] == 8192
    assert isinstance(seen.body["system"], str) and "kernel" in seen.body["system"]
    assert seen.body["messages"][0]["role"] == "user"
    assert not result.error, result.message
    assert len(result.candidates) == 1 and "kf_forward" in result.candidates[0].source.code
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (300, 200)
    assert result.usage.cost_usd == pytest.approx((300 * 2.0 + 200 * 8.0) / 1e6)


@pytest.mark.parametrize(
    ("kind", "body"), [("openai", openai_body(ANSWER)), ("anthropic", anthropic_body(ANSWER))]
)
async def test_429_then_200_is_retried_honouring_retry_after(kind: str, body: Any) -> None:
    error = (
        openai_error("Rate limit reached", "requests")
        if kind == "openai"
        else anthropic_error("Number of requests has exceeded your rate limit", "rate_limit_error")
    )
    sleeps = Sleeps()
    with ChatServer([Answer(429, error, {"retry-after": "3"}), Answer(body=body)]) as server:
        gen = provider(kind, server.url + ("/v1" if kind == "openai" else ""), sleeps)
        result = await gen.generate(request())
        await gen.close()
    assert len(server.seen) == 2
    assert sleeps.calls == [3.0]
    assert not result.error and len(result.candidates) == 1


async def test_5xx_backs_off_exponentially_with_jitter_and_then_fails_with_a_reason() -> None:
    sleeps = Sleeps()
    with ChatServer([Answer(503, openai_error("overloaded", "server_error"))]) as server:
        gen = provider("openai", server.url, sleeps, retries=4, backoff_s=1.0)
        result = await gen.generate(request())
        await gen.close()
    assert len(server.seen) == 5
    assert len(sleeps.calls) == 4
    for attempt, delay in enumerate(sleeps.calls):
        assert 0.0 <= delay <= 1.0 * 2**attempt
    assert len(set(sleeps.calls)) > 1  # jittered, not a fixed schedule
    assert result.candidates == ()
    assert result.error == "provider_unavailable"
    assert "HTTP 503" in result.message and "overloaded" in result.message and "5 attempts" in result.message


async def test_connection_errors_are_retried_then_reported() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps = Sleeps()
    gen = provider("openai", f"http://127.0.0.1:{port}/v1", sleeps, retries=2)
    result = await gen.generate(request())
    await gen.close()
    assert len(sleeps.calls) == 2
    assert result.error == "provider_unavailable" and "ConnectError" in result.message


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (Answer(body=b"<html>502 Bad Gateway</html>"), "not JSON"),
        (Answer(body={"id": "x", "object": "chat.completion", "choices": []}), "choices[0]"),
        (Answer(body={"choices": [{"message": {"role": "assistant", "content": None}}]}), "not text"),
    ],
)
async def test_a_malformed_body_is_a_clear_generation_failure(answer: Answer, words: str) -> None:
    with ChatServer([answer]) as server:
        gen = provider("openai", server.url)
        result = await gen.generate(request())
        await gen.close()
    assert result.candidates == ()
    assert result.error == "malformed_response"
    assert words in result.message


async def test_an_answer_without_a_kernel_is_a_recorded_failure_with_its_tokens() -> None:
    with ChatServer([Answer(body=openai_body("I cannot help with that.", 900, 12))]) as server:
        gen = provider("openai", server.url)
        result = await gen.generate(request())
        await gen.close()
    assert result.error == "no_kernel" and "no ```cpp block" in result.message
    assert result.usage.prompt_tokens == 900 and result.usage.completion_tokens == 12


async def test_a_cut_answer_says_so() -> None:
    with ChatServer([Answer(body=openai_body('```cpp\n#include "kf_abi.h"\n', finish="length"))]) as server:
        gen = provider("openai", server.url)
        result = await gen.generate(request())
        await gen.close()
    assert result.error == "no_kernel" and "max_tokens" in result.message


async def test_a_slow_server_times_out_with_a_reason() -> None:
    sleeps = Sleeps()
    with ChatServer([Answer(body=openai_body(ANSWER), delay_s=1.0)]) as server:
        gen = provider("openai", server.url, sleeps, timeout_s=0.2, retries=1)
        started = time.monotonic()
        result = await gen.generate(request())
        elapsed = time.monotonic() - started
        await gen.close()
    assert result.error == "provider_timeout" and "0.2 s" in result.message
    assert elapsed < 2.0
    assert len(server.seen) == 2


async def test_a_rejected_key_is_not_retried_and_the_key_never_shows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    echo = f"Incorrect API key provided: {KEY}. You can find your API key at https://example.invalid."
    sleeps = Sleeps()
    caplog.set_level(logging.DEBUG)
    with ChatServer([Answer(401, openai_error(echo, "invalid_request_error", "invalid_api_key"))]) as server:
        gen = provider("openai", server.url, sleeps)
        result = await gen.generate(request())
        text = " ".join([repr(gen), str(gen.__dict__), repr(gen.options), repr(gen.endpoint), str(result)])
        await gen.close()
    assert len(server.seen) == 1 and sleeps.calls == []
    assert result.error == "provider_rejected" and "HTTP 401" in result.message
    assert "[redacted]" in result.message
    assert KEY not in text and KEY[:12] not in text and KEY[-12:] not in text
    assert KEY not in caplog.text
    spec = ProviderSpec(name="x", kind="openai", model="m", api_key=KEY)
    assert KEY not in repr(spec) and KEY not in str(spec.model_dump())


async def test_concurrency_is_limited_per_provider() -> None:
    with ChatServer([Answer(body=openai_body(ANSWER), delay_s=0.2)]) as server:
        gen = provider("openai", server.url, max_concurrency=2)
        results = await asyncio.gather(
            *(gen.generate(request(request_id=f"r{i}")) for i in range(3)),
            gen.generate(request(request_id="r9", count=3)),
        )
        await gen.close()
    assert len(server.seen) == 6
    assert server.max_in_flight == 2
    assert sum(len(r.candidates) for r in results) == 6


async def test_rate_limit_spaces_requests() -> None:
    with ChatServer([Answer(body=openai_body(ANSWER))]) as server:
        gen = provider("openai", server.url, requests_per_minute=600)  # one every 0.1 s
        started = time.monotonic()
        await asyncio.gather(*(gen.generate(request(request_id=f"r{i}")) for i in range(4)))
        elapsed = time.monotonic() - started
        await gen.close()
    assert len(server.seen) == 4
    assert elapsed >= 0.3  # the fourth request may start 0.3 s after the first at the earliest


async def test_rate_limiter_unlimited_does_not_wait() -> None:
    limiter = RateLimiter(0)
    started = time.monotonic()
    for _ in range(100):
        await limiter.acquire()
    assert time.monotonic() - started < 0.1


async def test_a_repair_request_carries_the_failure_back() -> None:
    failed = KernelSource("cpp", KERNEL.replace("a[i] * b[i] + a[i]", "a[i] - b[i]"))
    parent = ParentKernel(failed, Descriptors(), None, None, "wrong_result: max abs error 3.2 at index 17")
    with ChatServer([Answer(body=openai_body(ANSWER))]) as server:
        gen = provider("openai", server.url)
        result = await gen.generate(request(parent=parent, repair=True, mutation="fusion"))
        await gen.close()
    prompt = server.seen[0].body["messages"][1]["content"]
    assert "max abs error 3.2 at index 17" in prompt and "a[i] - b[i]" in prompt and "Repair" in prompt
    assert result.candidates[0].mutation == "fusion"


def test_retry_after_forms() -> None:
    assert retry_after_seconds({"retry-after": "7"}) == 7.0
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "7"}) == 1.5
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10.0
    assert retry_after_seconds({}) is None
    assert retry_after_seconds({"retry-after": "soon"}) is None


def test_redact_and_secret() -> None:
    secret = Secret(KEY)
    assert KEY not in repr(secret) and KEY not in str(secret) and KEY not in f"{secret}"
    assert redact(f"key={KEY} prefix={KEY[:14]}", [secret]).count("[redacted]") == 2


def test_provider_entries_are_validated_without_showing_keys() -> None:
    specs = parse_specs(
        json.dumps(
            [
                {"name": "local", "kind": "openai", "model": "qwen", "base_url": "http://h/v1"},
                {"name": "heuristic", "kind": "heuristic"},
            ]
        )
    )
    assert [s.name for s in specs] == ["local", "heuristic"]
    with pytest.raises(ValueError, match="model"):
        parse_specs('[{"name": "a", "kind": "openai"}]')
    with pytest.raises(ValueError, match="repeat"):
        parse_specs('[{"name": "a", "kind": "heuristic"}, {"name": "a", "kind": "heuristic"}]')
    with pytest.raises(ValueError) as info:
        parse_specs(json.dumps([{"name": "a", "kind": "openai", "model": "m", "api_key": KEY, "bogus": 1}]))
    assert KEY not in str(info.value)
    with pytest.raises(ValueError, match="kind"):
        parse_specs('[{"name": "a", "kind": "palm"}]')
    with pytest.raises(ValueError, match="sandbox"):
        parse_specs('[{"name": "a", "kind": "openai", "model": "m", "api_key_env": "MYAPIKEY"}]')
    key = ProviderSpec(name="a", kind="anthropic", model="m").key({"ANTHROPIC_API_KEY": KEY})
    assert key.reveal() == KEY


def test_crash_reports_of_the_command_line_print_no_local_variables() -> None:
    from kernelfoundry.cli.main import app

    assert app.pretty_exceptions_show_locals is False


@pytest.mark.parametrize("url", ["not a url", "ftp://127.0.0.1/v1", "http://[::1/v1"])
async def test_a_request_that_cannot_be_sent_is_rejected_without_retries(url: str) -> None:
    sleeps = Sleeps()
    gen = provider("openai", url, sleeps)
    result = await gen.generate(request())
    await gen.close()
    assert result.candidates == () and result.error in ("provider_rejected", "provider_unavailable")
    assert result.message.startswith("openai-test: ") and KEY not in result.message
    if result.error == "provider_rejected":
        assert sleeps.calls == []
