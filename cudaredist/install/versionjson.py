"""``version.json`` at the tree root, in the format NVIDIA's installer writes (pure).

CMake's FindCUDAToolkit and other tools read the toolkit's version from it; a tree without
nvcc (the ``runtime`` profile) has no other version a tool can read. The display names are
NVIDIA's, from ``[names]`` in profiles.toml; a component not listed there gets its own key.
"""

from __future__ import annotations

import json

from cudaredist.plan import Plan
from cudaredist.profiles import component_title

PATH = "version.json"
# The component the record files it under: NVIDIA's own key for the toolkit as a whole.
COMPONENT = "cuda"


def version_json(plan: Plan) -> bytes:
    body: dict[str, dict[str, str]] = {COMPONENT: {"name": "CUDA SDK", "version": plan.release}}
    for item in sorted(plan.items, key=lambda i: i.component):
        body[item.component] = {"name": component_title(item.component), "version": item.version}
    # NVIDIA's file: 3-space indent, keys in name order, a trailing newline
    return (json.dumps(body, indent=3) + "\n").encode()
