"""The compiler service."""
