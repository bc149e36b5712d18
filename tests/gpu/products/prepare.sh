#!/usr/bin/env bash
# On a machine that reaches PyPI: what tests/gpu/products/run.sh needs on a GPU machine without
# network, in build/gpu/products/ (ignored by git; about 45 MB, one carry): the cudaredist wheel of this checkout and its dependencies for this Python and the GPU
# machine's 3.12 (deps/), and NVIDIA's CUDA 13.0.2 wheels for nvcc, cudart, crt, cccl, profiler-api,
# NVTX plus the cuda-toolkit 13.0.2 metapackage (wheels/). cuDNN and cuSPARSELt are not carried:
# run.sh repacks the ones the GPU machine's PyTorch installed.
set -euo pipefail
R=$(cd "$(dirname "$0")/../../.." && pwd); cd "$R"
O=build/gpu/products; PY=${PYTHON:-$R/.venv/bin/python}
rm -rf $O; mkdir -p $O/wheels
bash tests/gpu/deps.sh $O/deps  # first: without the checkout's .venv it says what to make
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 \
  -d $O/wheels cuda-toolkit==13.0.2 nvidia-cuda-nvcc==13.0.88 nvidia-cuda-runtime==13.0.96 \
  nvidia-cuda-crt==13.0.88 nvidia-cuda-cccl==13.0.85 nvidia-cuda-profiler-api==13.0.85 nvidia-nvtx==13.0.85
du -sh $O/*; du -sh $O
