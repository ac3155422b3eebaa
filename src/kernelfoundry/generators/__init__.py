"""Generators: where kernel candidates come from (the built-in heuristic proposer, later LLM adapters).

Every generator implements kernelfoundry.generators.base.Generator; nothing here imports a transport.
"""
