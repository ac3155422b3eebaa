"""The LLM meta-prompter: a model rewrites a prompt variant's guidance sections from the run's recent
successes and failures.

The evolver's MetaPrompter (kernelfoundry.domain.metaprompt) keeps the population of prompt variants,
their fitness and their selection, and writes each new variant's sections with its rule-based rewriter
(the failure counts and the operators that worked). Here, in the llm service, the first request that
carries a variant has those sections rewritten by a chat model fed with the same kind of record
(kernelfoundry.domain.metaprompt.Feedback, gathered from the run's evaluation events); the rewrite is
kept for that run and variant, so a variant's text stays fixed while its fitness is measured. A rewrite
that fails or answers something unusable leaves the sections as they were.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from kernelfoundry.domain.metaprompt import Feedback
from kernelfoundry.generators.base import GenerationUsage
from kernelfoundry.generators.prompts import metaprompt_prompt
from kernelfoundry.generators.providers.base import ChatProvider
from kernelfoundry.generators.providers.transport import GenerationFailure

SECTION_CHARS = 2000
MAX_RUNS = 256
_JSON_BLOCK = re.compile(r"```(?:json)?[^\n]*\n(.*?)```", re.DOTALL)


@dataclass
class Rewrite:
    sections: dict[str, str]
    usage: GenerationUsage = field(default_factory=GenerationUsage)
    rewritten: bool = False
    error: str = ""


class LLMMetaPrompter:
    def __init__(self, provider: ChatProvider, min_feedback: int = 4, window: int = 50) -> None:
        self.provider = provider
        self.min_feedback = min_feedback
        self.window = window
        self._feedback: OrderedDict[str, deque[Feedback]] = OrderedDict()
        self._rewrites: dict[tuple[str, str], dict[str, str]] = {}
        self.calls = 0

    @property
    def name(self) -> str:
        """What its tokens and cost are booked under: its own line beside the members' answers."""
        return f"{self.provider.name} (meta-prompter)"

    def record(self, run_id: str, feedback: Feedback) -> None:
        record = self._feedback.get(run_id)
        if record is None:
            record = self._feedback[run_id] = deque(maxlen=self.window)
            while len(self._feedback) > MAX_RUNS:
                old, _ = self._feedback.popitem(last=False)
                self._rewrites = {k: v for k, v in self._rewrites.items() if k[0] != old}
        record.append(feedback)

    def forget(self, run_id: str) -> None:
        self._feedback.pop(run_id, None)
        self._rewrites = {k: v for k, v in self._rewrites.items() if k[0] != run_id}

    async def guidance(
        self, run_id: str, variant_id: str, sections: Mapping[str, str], backend: str
    ) -> Rewrite:
        """The variant's sections for this run: rewritten once from the record, then kept."""
        key = (run_id, variant_id)
        if key in self._rewrites:
            return Rewrite(dict(self._rewrites[key]))
        feedback = list(self._feedback.get(run_id, ()))
        if not variant_id or not sections or len(feedback) < self.min_feedback:
            return Rewrite(dict(sections))
        self.calls += 1
        try:
            completion = await self.provider.complete(metaprompt_prompt(sections, feedback, backend), seed=0)
        except GenerationFailure as failure:
            return Rewrite(dict(sections), error=f"{failure.reason}: {failure.message}")
        rewritten = parse_sections(completion.text, sections)
        if rewritten is None:
            return Rewrite(
                dict(sections), completion.usage, error="the meta-prompter's answer had no sections"
            )
        self._rewrites[key] = rewritten
        return Rewrite(dict(rewritten), completion.usage, rewritten=True)


def parse_sections(text: str, sections: Mapping[str, str]) -> dict[str, str] | None:
    """The new text of each of `sections` from the answer's JSON object (unknown keys ignored, missing
    ones kept); None when no JSON object with any of them is there."""
    candidates = [m.group(1) for m in _JSON_BLOCK.finditer(text)]
    if text.strip().startswith("{"):
        candidates.insert(0, text.strip())
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        found = {k: v for k, v in data.items() if k in sections and isinstance(v, str | list)}
        if not found:
            continue
        out = dict(sections)
        for name, value in found.items():
            text_value = "\n".join(f"- {v}" for v in value) if isinstance(value, list) else value
            out[name] = text_value.strip()[:SECTION_CHARS]
        return out
    return None
