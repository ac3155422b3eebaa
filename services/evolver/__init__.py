"""The evolver service."""
