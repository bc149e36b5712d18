#!/usr/bin/env bash
# On a machine that reaches PyPI: everything tests/gpu/torch_tree/run.sh needs on a GPU machine without
# network, in build/gpu/torch_tree/ (ignored by git; 61 MiB: one carry, nothing left by another
# run): the cudaredist wheel of this checkout and its dependencies (deps/), and NVIDIA's CUDA 13.0.2
# wheels for nvcc, nvvm, crt, cccl, profiler-api, cudart, NVTX plus the cuda-toolkit 13.0.2
# metapackage, re-zipped stored and packed in one xz (wheels.tar.xz): xz takes CUDA's binaries to
# about half of what the wheels' deflate does (all eight: 108 MB as wheels, 60 MB so), which is
# what makes them fit one carry. The libraries the torch profile adds come from the GPU machine's
# PyTorch (run.sh repacks them).
set -euo pipefail
R=$(cd "$(dirname "$0")/../../.." && pwd); cd "$R"
O=build/gpu/torch_tree; PY=${PYTHON:-$R/.venv/bin/python}
rm -rf $O; mkdir -p $O
bash tests/gpu/deps.sh $O/deps  # first: without the checkout's .venv it says what to make
# only the GPU machine's CPython 3.12 installs from deps/ here: this machine's own builds (zlib-ng's
# cp311 wheel) would only take the carry past its 64 MiB
find $O/deps -name '*-cp3*-*.whl' ! -name '*-cp312-*' -delete
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 \
  --platform manylinux2010_x86_64 --platform manylinux_2_5_x86_64 \
  -d "$T/wheels" cuda-toolkit==13.0.2 nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
  nvidia-cuda-cccl==13.0.85 nvidia-cuda-profiler-api==13.0.85 nvidia-cuda-runtime==13.0.96 nvidia-nvtx==13.0.85
mkdir "$T/stored"
"$PY" - "$T/wheels" "$T/stored" <<'PY'
import pathlib, sys, zipfile
src, out = map(pathlib.Path, sys.argv[1:])
for w in sorted(src.glob("*.whl")):  # the same members, RECORD included: a valid wheel, stored
    with zipfile.ZipFile(w) as z, zipfile.ZipFile(out / w.name, "w", zipfile.ZIP_STORED) as o:
        for info in z.infolist():
            o.writestr(info, z.read(info), compress_type=zipfile.ZIP_STORED)
PY
tar -C "$T/stored" -cf - . | xz -9 -T0 > $O/wheels.tar.xz
du -sh $O/*; du -sh $O
