#!/usr/bin/env bash
# On the GPU machine: a torch-profile tree from NVIDIA's wheels (those this machine's PyTorch has
# installed, repacked byte for byte, plus nvcc/nvvm/cccl/crt/profiler-api carried in), then a PyTorch
# extension with ATen/cuda/CUDAContext.h and a cuBLAS program built against it. The system CUDA
# (/usr/local/cuda) is kept off PATH so nothing finds it by accident.
# Needs build/gpu/torch_tree only (carried: tests/gpu/torch_tree/prepare.sh), on a fresh machine too.
set -euo pipefail
K=$(cd "$(dirname "$0")" && pwd); R=$(cd "$K/../../.." && pwd); W=/tmp/cr; rm -rf $W; mkdir -p $W/carried
C=$R/build/gpu/torch_tree
[ -f "$C/wheels.tar.xz" ] || { echo "error: $C is missing or incomplete: run" \
  "tests/gpu/torch_tree/prepare.sh and carry build/gpu/torch_tree" >&2; exit 2; }
export PATH=/opt/torch/.venv/bin:/usr/bin:/bin; unset CUDA_HOME CUDA_PATH LD_LIBRARY_PATH
tar -C $W/carried -xJf $C/wheels.tar.xz
python3 -m venv $W/venv >/dev/null && $W/venv/bin/pip install -q --no-index --find-links $W/carried/deps cudaredist
/opt/torch/.venv/bin/python $K/repack_installed.py $W/index $W/carried | tail -3
CR=$W/venv/bin/cudaredist
time $CR install 13.0 --source pypi --index-url $W/index/simple --profile torch --prefix $W/cuda-13.0 --cache-dir $W/cache
$CR info --prefix $W/cuda-13.0 | head -30 || true
T=$W/cuda-13.0; ls $T; cat $T/version.json | head -5
echo "== cuBLAS program"; $T/bin/nvcc -arch=sm_90 -o $W/gemm $K/gemm.cu -lcublas
LD_LIBRARY_PATH=$T/lib64 ldd $W/gemm | grep -E "cublas|cudart" || true
LD_LIBRARY_PATH=$T/lib64 $W/gemm
echo "== PyTorch extension"; mkdir -p $W/build
time env CUDA_HOME=$T PATH=$T/bin:$PATH TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 /opt/torch/.venv/bin/python $K/check_extension.py $W/build
