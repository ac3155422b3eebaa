"""KernelFoundry: evolves faster kernels for a PyTorch reference computation."""

__version__ = "0.1.0"
