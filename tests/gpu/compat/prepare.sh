#!/usr/bin/env bash
# On a machine that reaches PyPI: what tests/gpu/compat/run.sh needs on the GPU machine, in
# build/gpu/compat/ (ignored by git; about 9 MiB, one carry):
#   deps/        the cudaredist wheel and its dependencies (this Python and CPython 3.12)
#   mirror/      CUDA 13.0.2's and 13.5.0's runtime profile (cudart, crt: NVIDIA's binaries from their
#                wheels) as a redist-shaped mirror, installed there as from NVIDIA's server
#                and, in mirror/nvidia-driver/redist/, tools/mkcompat.py's stand-in compat package
#                620.70.06 for 13.5 (real ELF files with NVIDIA's sonames, not drivers: it proves the
#                decision, not a launch), which run.sh installs with `--with compat`
#   sass_90, ptx_only   launch.cu built here by CUDA 13.5's nvcc (cudart static), as SASS for sm_90
#                and as PTX only (compute_90)
set -euo pipefail
R=$(cd "$(dirname "$0")/../../.." && pwd); cd "$R"
O=build/gpu/compat; PY=${PYTHON:-$R/.venv/bin/python}
TOOLS=${CUDAREDIST_SHARED_TOOLS:-$R/../shared/tools}
rm -rf $O; mkdir -p $O
bash tests/gpu/deps.sh $O/deps  # first: without the checkout's .venv it says what to make
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
for label in 13.0.2 13.5.0; do
  "$PY" -m cudaredist mirror $label --source pypi --profile runtime --platform linux-x86_64 --out $O/mirror -q
done
bash "$TOOLS/pypi-mirror.sh" 13.5.0 "$T/full" 2>/dev/null  # the compile set: nvcc 13.5 for launch.cu
"$PY" -m cudaredist install 13.5.0 --prefix "$T/cuda" --base-url "$T/full" -q
for out in sass_90:sm_90 ptx_only:compute_90; do
  "$T/cuda/bin/nvcc" -gencode "arch=compute_90,code=${out#*:}" -cudart static -o "$O/${out%%:*}" \
    tests/gpu/compat/launch.cu
done
python3 "$TOOLS/mkcompat.py" $O/mirror 620.70.06 13.5 >/dev/null
du -sh $O/*; du -sh $O
