"""NVIDIA's redist server (or a mirror of it): index listing, manifests, train resolution."""
