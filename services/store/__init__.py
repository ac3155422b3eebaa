"""The store service."""
