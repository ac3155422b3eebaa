"""The llm service."""
