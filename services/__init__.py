"""The five KernelFoundry services, installed as kernelfoundry.services; each is a thin adapter around the domain."""
