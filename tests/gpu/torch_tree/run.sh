#!/usr/bin/env bash
# On the GPU machine: a torch-profile tree from NVIDIA's wheels (those this machine's PyTorch has
# installed, repacked byte for byte, plus nvcc/nvvm/cccl/crt/profiler-api carried in), then a PyTorch
# extension with ATen/cuda/CUDAContext.h and a cuBLAS program built against it. The system CUDA
# (/usr/local/cuda) is kept off PATH so nothing finds it by accident.
# Needs build/gpu/torch_tree (carried: nvvm) and build/gpu/products (left by the products run on
# this machine: deps and the other wheels).
set -euo pipefail
K=$(cd "$(dirname "$0")" && pwd); R=$(cd "$K/../../.." && pwd); W=/tmp/cr; rm -rf $W; mkdir -p $W
P=$R/build/gpu/products; N=$R/build/gpu/torch_tree
for d in "$P/deps" "$N"; do
  [ -d "$d" ] || { echo "error: $d is missing: run tests/gpu/products/run.sh first on this machine (a" \
    "fresh machine has no build/gpu/products), carrying build/gpu/torch_tree here" >&2; exit 2; }
done
export PATH=/opt/torch/.venv/bin:/usr/bin:/bin; unset CUDA_HOME CUDA_PATH LD_LIBRARY_PATH
python3 -m venv $W/venv >/dev/null && $W/venv/bin/pip install -q --no-index --find-links $P/deps cudaredist
/opt/torch/.venv/bin/python $K/repack_installed.py $W/index $P/wheels $N | tail -3
CR=$W/venv/bin/cudaredist
time $CR install 13.0 --source pypi --index-url $W/index/simple --profile torch --prefix $W/cuda-13.0 --cache-dir $W/cache
$CR info --prefix $W/cuda-13.0 | head -30 || true
T=$W/cuda-13.0; ls $T; cat $T/version.json | head -5
echo "== cuBLAS program"; $T/bin/nvcc -arch=sm_90 -o $W/gemm $K/gemm.cu -lcublas
LD_LIBRARY_PATH=$T/lib64 ldd $W/gemm | grep -E "cublas|cudart" || true
LD_LIBRARY_PATH=$T/lib64 $W/gemm
echo "== PyTorch extension"; mkdir -p $W/build
time env CUDA_HOME=$T PATH=$T/bin:$PATH TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 /opt/torch/.venv/bin/python $K/check_extension.py $W/build
