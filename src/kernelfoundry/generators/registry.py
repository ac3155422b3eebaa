"""From configuration to generators: a registry from provider kind to factory (no if-chains).

KF_LLM_PROVIDERS is a JSON list of provider entries (docs/generators.md):

    [{"name": "local", "kind": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "qwen",
      "api_key_env": "VLLM_API_KEY", "weight": 2, "max_concurrency": 4, "requests_per_minute": 120},
     {"name": "heuristic", "kind": "heuristic", "weight": 1}]

An entry's key comes from `api_key` (the literal, discouraged) or from the environment variable named by
`api_key_env` (default: OPENAI_API_KEY for kind openai, ANTHROPIC_API_KEY for kind anthropic; a missing
variable means no key, as local servers need none), which must be a name every sandbox drops from the
environment (kernelfoundry.sandbox.policy.SECRET_PATTERNS: builds, the judge, runners and generator workers
never see it). Keys are wrapped in Secret at once and never shown.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from kernelfoundry.generators.accounting import PriceTable
from kernelfoundry.generators.base import Generator
from kernelfoundry.generators.providers.anthropic import AnthropicProvider
from kernelfoundry.generators.providers.base import ProviderOptions
from kernelfoundry.generators.providers.openai_compat import OpenAICompatProvider
from kernelfoundry.generators.providers.transport import HttpEndpoint, RetryPolicy, Secret
from kernelfoundry.sandbox.policy import is_secret_name

DEFAULT_KEY_ENV: Mapping[str, str] = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
DEFAULT_BASE_URL: Mapping[str, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}


class ProviderSpec(BaseModel):
    """One entry of KF_LLM_PROVIDERS."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$", max_length=64)
    kind: Literal["openai", "anthropic", "heuristic"]
    model: str = ""
    base_url: str = ""
    api_key: SecretStr = SecretStr("")
    api_key_env: str = ""
    weight: float = Field(1.0, gt=0)
    temperature: float = Field(0.7, ge=0, le=2)
    max_tokens: int = Field(8192, ge=256)
    timeout_s: float = Field(300.0, gt=0)
    retries: int = Field(3, ge=0, le=10)
    backoff_s: float = Field(1.0, ge=0)
    max_concurrency: int = Field(4, ge=1, le=256)
    requests_per_minute: float = Field(0.0, ge=0)
    hardware_notes: str = ""

    def key(self, environ: Mapping[str, str]) -> Secret:
        literal = self.api_key.get_secret_value()
        if literal:
            return Secret(literal)
        variable = self.api_key_env or DEFAULT_KEY_ENV.get(self.kind, "")
        return Secret(environ.get(variable, "") if variable else "")


def parse_specs(text: str) -> list[ProviderSpec]:
    """The entries of KF_LLM_PROVIDERS; ValueError naming what is wrong (never a key's value)."""
    if not text.strip():
        return []
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"KF_LLM_PROVIDERS is not JSON: {exc}") from None
    if not isinstance(data, list):
        raise ValueError("KF_LLM_PROVIDERS must be a JSON list of provider entries")
    specs = []
    for index, entry in enumerate(data):
        try:
            spec = ProviderSpec.model_validate(entry)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"KF_LLM_PROVIDERS[{index}]: {problems}") from None
        if spec.kind != "heuristic" and not spec.model:
            raise ValueError(f"KF_LLM_PROVIDERS[{index}] ({spec.name}): `model` is required")
        if spec.api_key_env and not is_secret_name(spec.api_key_env):
            raise ValueError(
                f"KF_LLM_PROVIDERS[{index}] ({spec.name}): api_key_env {spec.api_key_env!r} is not a name"
                " every sandbox drops from the environment; name the variable e.g. ..._API_KEY or ..._TOKEN"
            )
        specs.append(spec)
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"KF_LLM_PROVIDERS: provider names repeat: {names}")
    return specs


Factory = Callable[..., Generator]


def _chat(cls: type[OpenAICompatProvider] | type[AnthropicProvider]) -> Factory:
    def build(
        spec: ProviderSpec,
        *,
        prices: PriceTable,
        environ: Mapping[str, str],
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        **_: Any,
    ) -> Generator:
        key = spec.key(environ)
        endpoint = HttpEndpoint(
            spec.name,
            timeout_s=spec.timeout_s,
            retry=RetryPolicy(attempts=spec.retries + 1, base_delay_s=spec.backoff_s),
            max_concurrency=spec.max_concurrency,
            requests_per_minute=spec.requests_per_minute,
            secrets=(key,),
            transport=transport,
            sleep=sleep,
            rng=rng,
        )
        options = ProviderOptions(
            name=spec.name,
            model=spec.model,
            base_url=spec.base_url or DEFAULT_BASE_URL[spec.kind],
            api_key=key,
            temperature=spec.temperature,
            max_tokens=spec.max_tokens,
            hardware_notes=spec.hardware_notes,
        )
        return cls(options, endpoint, prices)

    return build


def _heuristic(spec: ProviderSpec, **_: Any) -> Generator:
    from kernelfoundry.generators.heuristic import HeuristicGenerator

    return HeuristicGenerator()


REGISTRY: dict[str, Factory] = {
    "openai": _chat(OpenAICompatProvider),
    "anthropic": _chat(AnthropicProvider),
    "heuristic": _heuristic,
}


def build(
    spec: ProviderSpec,
    *,
    prices: PriceTable | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Factory] | None = None,
    **options: Any,
) -> Generator:
    """The generator for `spec`; `overrides` replace factories by kind (the llm service runs the
    heuristic in sandboxed workers). The returned generator's name is the entry's name."""
    factory = {**REGISTRY, **(overrides or {})}.get(spec.kind)
    if factory is None:
        raise ValueError(f"unknown provider kind {spec.kind!r}; known: {', '.join(sorted(REGISTRY))}")
    generator = factory(
        spec, prices=prices or PriceTable(), environ=os.environ if environ is None else environ, **options
    )
    generator.name = spec.name
    return generator
