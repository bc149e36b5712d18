#!/usr/bin/env bash
# Run a program built against a cudaredist tree's --with product, on a GPU machine.
#
#   tests/gpu/products/product_check.sh [PRODUCT] [PREFIX] [TRAIN]
#
#   PRODUCT  cusparselt (default) or cudnn
#   PREFIX   the tree (default ./cuda-<TRAIN>-<PRODUCT>); when it does not exist it is made first with
#            `cudaredist install TRAIN --with PRODUCT --prefix PREFIX` (CUDAREDIST_SOURCE=pypi takes
#            NVIDIA's wheels from PyPI: cuDNN's is about 700 MB, cuSPARSELt's 170 MB)
#   TRAIN    the CUDA train (default 13.0)
#
# It compiles tests/gpu/products/product_check.cu with the tree's own nvcc (the host's CUDA variables and
# /usr/local/cuda are kept out), links it against the product in the tree (-lcudnn / -lcusparseLt,
# rpath into the tree), prints the library's version (no GPU needed), then makes one real call of
# the library on the GPU (cuDNN: cudnnCreate + a ReLU cudnnActivationForward; cuSPARSELt:
# cusparseLtInit + cusparseLtGetVersion). Exit 0 when both work.
# Env: CUDAREDIST (the command; default: the repository's .venv, else python3 -m cudaredist).
set -euo pipefail
product=${1:-cusparselt}
train=${3:-13.0}
prefix=${2:-./cuda-$train-$product}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
case $product in
  cudnn) define=-DCHECK_CUDNN; lib=-lcudnn ;;
  cusparselt) define=; lib=-lcusparseLt ;;
  *) echo "error: PRODUCT must be cudnn or cusparselt, not '$product'" >&2; exit 2 ;;
esac
if [ -n "${CUDAREDIST:-}" ]; then
  read -ra tool <<<"$CUDAREDIST"
elif [ -x "$repo/.venv/bin/cudaredist" ]; then
  tool=("$repo/.venv/bin/cudaredist")
else
  tool=(python3 -m cudaredist)
fi
if [ ! -e "$prefix" ]; then
  echo "+ ${tool[*]} install $train --with $product --prefix $prefix" >&2
  "${tool[@]}" install "$train" --with "$product" --prefix "$prefix"
fi
prefix=$(cd "$prefix" && pwd)
"${tool[@]}" info --prefix "$prefix" | sed -n '1,8p'
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# the tree's nvcc only: no CUDA_PATH/CUDA_HOME/LD_LIBRARY_PATH of the host, no /usr/local/cuda on PATH
clean=(env -i "HOME=$HOME" "PATH=$prefix/bin:/usr/bin:/bin" "TMPDIR=${TMPDIR:-/tmp}")
# the program has no kernels: a tree without NVVM (no nvvm/bin/cicc, e.g. --only -c nvcc -c cudart)
# still compiles it, as C++ through the same nvcc
as=()
[ -e "$prefix/nvvm/bin/cicc" ] || as=(-x c++)
echo "+ nvcc ${as[*]} $define product_check.cu $lib (from $prefix/bin/nvcc)" >&2
"${clean[@]}" "$prefix/bin/nvcc" "${as[@]}" $define -o "$work/product_check" "$here/product_check.cu" \
  -L"$prefix/lib" $lib -Xlinker -rpath="$prefix/lib"
echo "+ linked against:" >&2
ldd "$work/product_check" | grep -Ei 'cudnn|cusparse|cudart' >&2 || true
echo "+ product_check (the version function)" >&2
"${clean[@]}" "$work/product_check"
if command -v nvidia-smi >/dev/null; then nvidia-smi -L; fi
echo "+ product_check gpu (one real call on the device)" >&2
"${clean[@]}" "$work/product_check" gpu
echo "ok: $product from $prefix works on this machine"
