"""NVIDIA's wheels on a package index: the cuda-toolkit metapackage, wheel layout, re-packing."""
