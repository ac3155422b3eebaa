"""HTTP model providers behind the Generator interface: OpenAI-compatible chat completions (OpenAI,
vLLM, Ollama, LiteLLM and other proxies) and Anthropic messages. They run in the llm service process
only (kernelfoundry.generators.registry builds them from configuration)."""
