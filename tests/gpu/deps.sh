#!/usr/bin/env bash
# The cudaredist wheel of this checkout and every dependency, for this machine's Python and for the
# GPU machine's (CPython 3.12, manylinux x86_64, no network there): what
# `pip install --no-index --find-links DEST cudaredist` needs on either. Runs with the checkout's
# .venv (or $PYTHON); without one it says what to make, before anything is fetched.
#   tests/gpu/deps.sh DEST
set -euo pipefail
dest=${1:?usage: deps.sh DEST}
R=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-$R/.venv/bin/python}  # the checkout's venv (pip, and this checkout's cudaredist)
[ -x "$PY" ] || { echo "error: $PY does not exist: the GPU prepare steps run with the checkout's venv;" \
  "make it first (python3 -m venv .venv && .venv/bin/pip install -e .), or set PYTHON to a Python" \
  "with pip and this checkout's cudaredist installed" >&2; exit 2; }
mkdir -p "$dest"
"$PY" -m pip wheel -q "$R" -w "$dest"
"$PY" -m pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 \
  -d "$dest" "$dest"/cudaredist-*.whl
