#!/usr/bin/env bash
# On a machine that reaches PyPI: NVIDIA's nvvm 13.0.88 wheel (CPython 3.12, manylinux x86_64) in
# build/gpu/torch_tree/ (ignored by git; 62 MB: a carry of its own). The rest of what
# tests/gpu/torch_tree/run.sh needs (the cudaredist wheel and its dependencies, nvcc, crt, cccl,
# profiler-api and the cuda-toolkit 13.0.2 metapackage) is build/gpu/products/, which
# tests/gpu/products/prepare.sh makes and the products run leaves on the GPU machine.
set -euo pipefail
R=$(cd "$(dirname "$0")/../../.." && pwd); cd "$R"
O=build/gpu/torch_tree
rm -rf $O; mkdir -p $O
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 --platform manylinux_2_17_x86_64 \
  -d $O nvidia-nvvm==13.0.88
[ -d build/gpu/products/deps ] || bash tests/gpu/products/prepare.sh
du -sh $O/* build/gpu/products
