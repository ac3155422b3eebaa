"""The five KernelFoundry services, installed as kernelfoundry.services.

Each is a thin adapter around the domain: handlers.py per message type, main.py wiring only.
"""
