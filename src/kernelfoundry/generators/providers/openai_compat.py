"""The OpenAI-compatible chat-completions API: OpenAI itself, vLLM, Ollama (/v1), LiteLLM and other
proxies. POST {base_url}/chat/completions with `Authorization: Bearer <key>` (no header without a key,
as local servers need none)."""

from __future__ import annotations

from typing import Any

from kernelfoundry.generators.prompts import Prompt
from kernelfoundry.generators.providers.base import ChatProvider, Completion
from kernelfoundry.generators.providers.transport import GenerationFailure

KIND = "openai"


class OpenAICompatProvider(ChatProvider):
    def url(self) -> str:
        return self.options.base_url.rstrip("/") + "/chat/completions"

    def headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self.options.api_key:
            headers["authorization"] = f"Bearer {self.options.api_key.reveal()}"
        return headers

    def body(self, prompt: Prompt, seed: int) -> dict[str, Any]:
        return {
            "model": self.options.model,
            "messages": [
                {"role": "system", "content": prompt.system},
                {"role": "user", "content": prompt.user},
            ],
            "temperature": self.options.temperature,
            "max_tokens": self.options.max_tokens,
            "seed": seed,
        }

    async def complete(self, prompt: Prompt, seed: int) -> Completion:
        reply = await self.endpoint.post_json(self.url(), self.headers(), self.body(prompt, seed))
        return self.read(reply.body)

    def read(self, body: Any) -> Completion:
        try:
            choice = body["choices"][0]
            message = choice["message"]
            content = message.get("content")
            finish = str(choice.get("finish_reason") or "")
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise GenerationFailure(
                "malformed_response",
                f"{self.name}: no choices[0].message in the chat completion ({type(exc).__name__}: {exc})",
            ) from None
        if isinstance(content, list):  # some proxies answer with content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise GenerationFailure(
                "malformed_response", f"{self.name}: choices[0].message.content is not text"
            )
        usage = body.get("usage") if isinstance(body, dict) else None
        prompt_tokens = _int(usage, "prompt_tokens")
        completion_tokens = _int(usage, "completion_tokens")
        return Completion(content, self.price(prompt_tokens, completion_tokens), finish)


def _int(usage: Any, key: str) -> int:
    if not isinstance(usage, dict):
        return 0
    value = usage.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else 0
