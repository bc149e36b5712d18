"""cudaredist: assemble a CUDA toolkit tree from NVIDIA's redistributable archives."""

__version__ = "0.1.0"
