"""The LLM meta-prompter rewrites a variant's guidance once per run from the record, through a chat
provider speaking the OpenAI-compatible wire format."""

from __future__ import annotations

import json

from kernelfoundry.domain.metaprompt import PITFALLS, STRATEGIES, Feedback
from kernelfoundry.generators.accounting import PriceTable
from kernelfoundry.generators.metaprompter import LLMMetaPrompter, parse_sections
from kernelfoundry.generators.registry import ProviderSpec, build

from .chat_server import Answer, ChatServer, openai_body, openai_error

SECTIONS = {PITFALLS: "- wrong_result in 2 of the last 6 children", STRATEGIES: ""}
FEEDBACK = [
    Feedback(1, "tiling", "failed:wrong_result", -1.0, "max abs error 1.5 at index 40"),
    Feedback(1, "vectorize", "improvement", 0.3),
    Feedback(2, "tiling", "failed:compile_error", -1.0, "error: 'tile' was not declared"),
    Feedback(2, "parallel", "neutral", 0.0),
]
REWRITE = {
    PITFALLS: "- declare tile buffers before use\n- check edge rows",
    STRATEGIES: ["vectorize the inner loop"],
}


def provider(url: str):  # type: ignore[no-untyped-def]
    spec = ProviderSpec(name="meta", kind="openai", model="m", base_url=url, retries=0)
    return build(spec, prices=PriceTable.from_json('{"m": {"prompt": 1, "completion": 1}}'), environ={})


async def test_rewrites_once_per_run_and_variant_from_the_record() -> None:
    answer = "```json\n" + json.dumps(REWRITE) + "\n```"
    with ChatServer([Answer(body=openai_body(answer, 400, 80))]) as server:
        meta = LLMMetaPrompter(provider(server.url), min_feedback=4)
        early = await meta.guidance("run-1", "p1", SECTIONS, "cpu")
        for f in FEEDBACK:
            meta.record("run-1", f)
        first = await meta.guidance("run-1", "p1", SECTIONS, "cpu")
        again = await meta.guidance("run-1", "p1", SECTIONS, "cpu")
        await meta.provider.close()
    assert early.sections == SECTIONS and not early.rewritten  # too little record yet: the rules' text
    assert first.rewritten and first.sections[PITFALLS].startswith("- declare tile buffers")
    assert first.sections[STRATEGIES] == "- vectorize the inner loop"
    assert first.usage.prompt_tokens == 400 and first.usage.cost_usd > 0
    assert again.sections == first.sections and again.usage.prompt_tokens == 0
    assert len(server.seen) == 1
    asked = server.seen[0].body["messages"][1]["content"]
    assert "max abs error 1.5 at index 40" in asked and "'tile' was not declared" in asked


async def test_a_failed_rewrite_keeps_the_sections() -> None:
    with ChatServer([Answer(500, openai_error("boom", "server_error"))]) as server:
        meta = LLMMetaPrompter(provider(server.url), min_feedback=1)
        meta.record("run-1", FEEDBACK[0])
        result = await meta.guidance("run-1", "p1", SECTIONS, "cpu")
        await meta.provider.close()
    assert result.sections == SECTIONS and not result.rewritten and "provider_unavailable" in result.error
    meta.forget("run-1")
    assert await meta.guidance("run-1", "p1", SECTIONS, "cpu") is not None


def test_parse_sections_ignores_unknown_keys_and_keeps_missing_ones() -> None:
    parsed = parse_sections('{"common pitfalls": "- new", "other": "x"}', SECTIONS)
    assert parsed == {PITFALLS: "- new", STRATEGIES: ""}
    assert parse_sections("no json here", SECTIONS) is None
    assert parse_sections('{"unrelated": "x"}', SECTIONS) is None
