"""The Anthropic messages API: POST {base_url}/v1/messages with `x-api-key` and `anthropic-version`."""

from __future__ import annotations

from typing import Any

from kernelfoundry.generators.prompts import Prompt
from kernelfoundry.generators.providers.base import ChatProvider, Completion
from kernelfoundry.generators.providers.transport import GenerationFailure

KIND = "anthropic"
API_VERSION = "2023-06-01"


class AnthropicProvider(ChatProvider):
    def url(self) -> str:
        base = self.options.base_url.rstrip("/")
        return base + ("/messages" if base.endswith("/v1") else "/v1/messages")

    def headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "anthropic-version": API_VERSION}
        if self.options.api_key:
            headers["x-api-key"] = self.options.api_key.reveal()
        return headers

    def body(self, prompt: Prompt, seed: int) -> dict[str, Any]:
        del seed  # the messages API takes no seed
        return {
            "model": self.options.model,
            "max_tokens": self.options.max_tokens,
            "system": prompt.system,
            "messages": [{"role": "user", "content": prompt.user}],
            "temperature": min(1.0, self.options.temperature),
        }

    async def complete(self, prompt: Prompt, seed: int) -> Completion:
        reply = await self.endpoint.post_json(self.url(), self.headers(), self.body(prompt, seed))
        return self.read(reply.body)

    def read(self, body: Any) -> Completion:
        if not isinstance(body, dict) or not isinstance(body.get("content"), list):
            raise GenerationFailure("malformed_response", f"{self.name}: the message has no `content` list")
        text = "".join(
            part.get("text", "")
            for part in body["content"]
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        )
        usage = body.get("usage")
        prompt_tokens = _int(usage, "input_tokens")
        completion_tokens = _int(usage, "output_tokens")
        return Completion(
            text, self.price(prompt_tokens, completion_tokens), str(body.get("stop_reason") or "")
        )


def _int(usage: Any, key: str) -> int:
    if not isinstance(usage, dict):
        return 0
    value = usage.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else 0
