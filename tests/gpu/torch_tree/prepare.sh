#!/usr/bin/env bash
# On a machine that reaches PyPI: everything tests/gpu/torch_tree/run.sh needs on a GPU machine without
# network, in build/gpu/torch_tree/ (ignored by git; about 60 MiB: one carry, nothing left by another
# run): NVIDIA's CUDA 13.0.2 wheels for nvcc, nvvm, crt, cccl, profiler-api, cudart, NVTX plus the
# cuda-toolkit 13.0.2 metapackage, and the cudaredist wheel of this checkout and its dependencies
# (deps/), re-zipped stored and packed in one xz (wheels.tar.xz): xz takes CUDA's binaries to
# about half of what the wheels' deflate does (all eight: 108 MB as wheels, 60 MB so), which is
# what makes them fit one carry. The libraries the torch profile adds come from the GPU machine's
# PyTorch (run.sh repacks them).
set -euo pipefail
R=$(cd "$(dirname "$0")/../../.." && pwd); cd "$R"
O=build/gpu/torch_tree; PY=${PYTHON:-$R/.venv/bin/python}
rm -rf $O; mkdir -p $O
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
bash tests/gpu/deps.sh "$T/wheels/deps"  # first: without the checkout's .venv it says what to make
here=$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')  # this Python's own wheels
[ "$here" = cp312 ] || rm -f "$T/wheels/deps"/*-"$here"-"$here"-*.whl  # stay here: the GPU machine runs 3.12
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 \
  --platform manylinux2010_x86_64 --platform manylinux_2_5_x86_64 \
  -d "$T/wheels" cuda-toolkit==13.0.2 nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
  nvidia-cuda-cccl==13.0.85 nvidia-cuda-profiler-api==13.0.85 nvidia-cuda-runtime==13.0.96 nvidia-nvtx==13.0.85
mkdir -p "$T/stored/deps"
"$PY" - "$T/wheels" "$T/stored" <<'PY'
import pathlib, sys, zipfile
src, out = map(pathlib.Path, sys.argv[1:])
for w in sorted(src.glob("*.whl")) + sorted(src.glob("deps/*.whl")):  # the same members, RECORD
    w_out = out / w.relative_to(src)  # included: a valid wheel, stored
    with zipfile.ZipFile(w) as z, zipfile.ZipFile(w_out, "w", zipfile.ZIP_STORED) as o:
        for info in z.infolist():
            o.writestr(info, z.read(info), compress_type=zipfile.ZIP_STORED)
PY
tar -C "$T/stored" -cf - . | xz -9e -T0 > $O/wheels.tar.xz
du -sh $O/*; du -sh $O
