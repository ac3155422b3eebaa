"""The part of every chat-model provider that is not the wire format: one prompt per candidate, the
answer parsed into a kernel, usage priced, failures turned into a result with a reason."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from kernelfoundry.generators.accounting import PriceTable, add
from kernelfoundry.generators.base import (
    GeneratedCandidate,
    GenerationRequest,
    GenerationResult,
    GenerationUsage,
)
from kernelfoundry.generators.parsing import parse_kernel
from kernelfoundry.generators.prompts import Prompt, kernel_prompt
from kernelfoundry.generators.providers.transport import GenerationFailure, HttpEndpoint, Secret


@dataclass(frozen=True)
class Completion:
    text: str
    usage: GenerationUsage
    finish_reason: str = ""


@dataclass(frozen=True)
class ProviderOptions:
    """One provider's settings (an entry of KF_LLM_PROVIDERS; docs/generators.md)."""

    name: str
    model: str
    base_url: str
    api_key: Secret = field(default_factory=lambda: Secret(""), repr=False)
    temperature: float = 0.7
    max_tokens: int = 8192
    hardware_notes: str = ""


class ChatProvider(ABC):
    """A Generator over a chat API; subclasses speak the wire format (`complete`)."""

    def __init__(self, options: ProviderOptions, endpoint: HttpEndpoint, prices: PriceTable) -> None:
        self.name = options.name
        self.options = options
        self.endpoint = endpoint
        self.prices = prices

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.options.model!r})"

    @abstractmethod
    async def complete(self, prompt: Prompt, seed: int) -> Completion: ...

    async def close(self) -> None:
        await self.endpoint.close()

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        prompt = kernel_prompt(request, self.options.hardware_notes)
        answers = await asyncio.gather(
            *(self._one(prompt, request, request.seed + i) for i in range(request.count)),
            return_exceptions=True,
        )
        candidates: list[GeneratedCandidate] = []
        failures: list[GenerationFailure] = []
        usage = GenerationUsage()
        for answer in answers:
            if isinstance(answer, GenerationFailure):
                failures.append(answer)
                usage = add(usage, answer.usage)
            elif isinstance(answer, BaseException):
                raise answer
            else:
                candidate, spent = answer
                candidates.append(candidate)
                usage = add(usage, spent)
        if candidates or not failures:
            return GenerationResult(tuple(candidates), usage, self.name)
        first = failures[0]
        transport = [f for f in failures if f.provider_fault]
        chosen = transport[0] if transport else first
        return GenerationResult((), usage, self.name, error=chosen.reason, message=chosen.message[:4000])

    async def _one(
        self, prompt: Prompt, request: GenerationRequest, seed: int
    ) -> tuple[GeneratedCandidate, GenerationUsage]:
        completion = await self.complete(prompt, seed)
        try:
            parsed = parse_kernel(completion.text, request.backend)
        except GenerationFailure as failure:
            if completion.finish_reason in ("length", "max_tokens"):
                failure = GenerationFailure(
                    failure.reason, f"{failure.message} (the answer was cut at max_tokens)"
                )
            failure.usage = completion.usage  # the tokens were spent all the same
            raise failure from None
        mutation = request.mutation or "seed"
        rationale = parsed.rationale or f"{self.options.model} ({mutation})"
        return GeneratedCandidate(parsed.source, parsed.strategy, mutation, rationale), completion.usage

    def price(self, prompt_tokens: int, completion_tokens: int) -> GenerationUsage:
        return self.prices.usage(self.options.model, prompt_tokens, completion_tokens)
