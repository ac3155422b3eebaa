"""Tokens and cost: the price table from configuration, and per-model sums (a run's, RunUsage).

Prices are US dollars per million tokens, prompt and completion, per model name (KF_LLM_PRICES). A model
not in the table costs 0 and says so (`priced` is False), so a bill is never invented. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from kernelfoundry.generators.base import GenerationUsage


@dataclass(frozen=True)
class Price:
    prompt_per_mtok: float
    completion_per_mtok: float


class PriceTable:
    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        self.prices = dict(prices or {})

    @classmethod
    def from_json(cls, text: str) -> PriceTable:
        """`{"model": {"prompt": 2.5, "completion": 10.0}, ...}` (USD per million tokens)."""
        if not text.strip():
            return cls()
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("the price table must be a JSON object of model -> {prompt, completion}")
        prices = {}
        for model, entry in data.items():
            if not isinstance(entry, dict) or not {"prompt", "completion"} <= entry.keys():
                raise ValueError(
                    f"price of {model!r} needs `prompt` and `completion` (USD per million tokens)"
                )
            prompt, completion = float(entry["prompt"]), float(entry["completion"])
            if prompt < 0 or completion < 0:
                raise ValueError(f"price of {model!r} is negative")
            prices[str(model)] = Price(prompt, completion)
        return cls(prices)

    def priced(self, model: str) -> bool:
        return model in self.prices

    def usage(self, model: str, prompt_tokens: int, completion_tokens: int) -> GenerationUsage:
        price = self.prices.get(model)
        cost = 0.0
        if price is not None:
            cost = (
                prompt_tokens * price.prompt_per_mtok + completion_tokens * price.completion_per_mtok
            ) / 1e6
        return GenerationUsage(prompt_tokens, completion_tokens, cost)


def add(a: GenerationUsage, b: GenerationUsage) -> GenerationUsage:
    return GenerationUsage(
        a.prompt_tokens + b.prompt_tokens, a.completion_tokens + b.completion_tokens, a.cost_usd + b.cost_usd
    )


@dataclass
class UsageTotals:
    """Requests answered and what they cost."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, usage: GenerationUsage) -> None:
        self.requests += 1
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        self.cost_usd += usage.cost_usd


def meta_usage_id(request_id: str) -> str:
    """The usage record of the meta-prompter's rewrite for a request (the answer's is the request id)."""
    return f"{request_id}-meta"


class RunUsage:
    """A run's tokens and cost, in total and per generator (an ensemble's member: one model each).

    Each request is counted once, by its id: an answer delivered twice, or one replayed from the lineage
    on resume and then delivered again, adds nothing the second time."""

    UNNAMED = "unknown"  # the name the lineage files a request without a generator under

    def __init__(self) -> None:
        self.by_generator: dict[str, UsageTotals] = {}
        self._counted: set[str] = set()

    def record(self, request_id: str, generator: str, usage: GenerationUsage) -> bool:
        """Count one answered request; False when it was already counted."""
        if request_id in self._counted:
            return False
        self._counted.add(request_id)
        self.by_generator.setdefault(generator or self.UNNAMED, UsageTotals()).add(usage)
        return True

    def total(self) -> UsageTotals:
        total = UsageTotals()
        for part in self.by_generator.values():
            total.requests += part.requests
            total.prompt_tokens += part.prompt_tokens
            total.completion_tokens += part.completion_tokens
            total.cost_usd += part.cost_usd
        return total
