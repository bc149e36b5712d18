#!/usr/bin/env bash
# On the GPU machine (no network): a CUDA 13.0 tree from NVIDIA's wheels -- nvcc/cudart/crt/cccl
# carried in build/gpu/products/wheels, cuDNN and cuSPARSELt repacked byte for byte from the wheels this
# machine's PyTorch installed (tests/gpu/torch_tree/repack_installed.py) -- installed with
# `--with cudnn --with cusparselt`, then tests/gpu/product_check.sh for each product.
set -euo pipefail
R=$(pwd); C=$R/build/gpu/products; W=/tmp/crp; rm -rf $W; mkdir -p $W
[ -d "$C/deps" ] || { echo "error: $C is missing: run tests/gpu/products/prepare.sh and carry build/gpu/products" >&2; exit 2; }
export PATH=/opt/torch/.venv/bin:/usr/bin:/bin; unset CUDA_HOME CUDA_PATH LD_LIBRARY_PATH
python3 -m venv $W/venv >/dev/null && $W/venv/bin/pip install -q --no-index --find-links $C/deps cudaredist
/opt/torch/.venv/bin/python $R/tests/gpu/torch_tree/repack_installed.py $W/index $C/wheels | tail -4
CR=$W/venv/bin/cudaredist
$CR resolve 13.0 --source pypi --index-url $W/index/simple --only -c nvcc -c cudart -c crt -c cccl \
  --with cudnn --with cusparselt --cache-dir $W/cache | grep -v sha256
time $CR install 13.0 --source pypi --index-url $W/index/simple --only -c nvcc -c cudart -c crt -c cccl \
  --with cudnn --with cusparselt --prefix $W/cuda --cache-dir $W/cache
$CR verify --prefix $W/cuda
export CUDAREDIST=$CR
bash $R/tests/gpu/products/product_check.sh cudnn $W/cuda
bash $R/tests/gpu/products/product_check.sh cusparselt $W/cuda
