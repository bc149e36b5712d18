#!/usr/bin/env bash
# The cudaredist wheel of this checkout and every dependency, for this machine's Python and for the
# GPU machine's (CPython 3.12, manylinux x86_64, no network there): what
# `pip install --no-index --find-links DEST cudaredist` needs on either.
#   tests/gpu/deps.sh DEST
set -euo pipefail
dest=${1:?usage: deps.sh DEST}
R=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$dest"
python3 -m pip wheel -q "$R" -w "$dest"
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 \
  -d "$dest" "$dest"/cudaredist-*.whl
