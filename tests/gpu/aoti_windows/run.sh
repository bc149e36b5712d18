#!/usr/bin/env bash
# On the GPU machine (no network), from the repository root, with build/gpu/aoti_windows carried
# (tests/gpu/aoti_windows/prepare.sh): the WSL/Linux recipe of docs/cross-compile.md as written.
# A Windows runtime tree (cudaredist install 13.0 --platform windows-x86_64 --profile runtime, from
# the carried mirror), WINDOWS_CUDA_HOME from `cudaredist env`, MinGW-w64 (the machine's, else the
# carried one), then this machine's PyTorch exports a small model with AOTInductor for Windows;
# the package's DLL must import cudart64_13.dll. Last, what torch wrote into the tree, and verify.
set -euo pipefail
R=$(pwd); C=$R/build/gpu/aoti_windows; W=/tmp/cra; rm -rf $W; mkdir -p $W
[ -d "$C/deps" ] || { echo "error: $C is missing: run tests/gpu/aoti_windows/prepare.sh and carry build/gpu/aoti_windows" >&2; exit 2; }
export PATH=/opt/torch/.venv/bin:/usr/local/bin:/usr/bin:/bin TORCHINDUCTOR_CACHE_DIR=$W/inductor
unset CUDA_HOME CUDA_PATH LD_LIBRARY_PATH WINDOWS_CUDA_HOME
if ! command -v x86_64-w64-mingw32-g++ >/dev/null; then
  tar -C $W -xJf $C/mingw.tar.xz; export PATH=$W/mingw/usr/bin:$PATH
  # ldconfig lives in /sbin or /usr/sbin, which the PATH above leaves out; none at all: carried ones
  LDCONFIG=$(PATH=/sbin:/usr/sbin:$PATH command -v ldconfig || true)
  for l in libisl.so.23 libmpc.so.3 libmpfr.so.6; do
    { [ -n "$LDCONFIG" ] && "$LDCONFIG" -p | grep "$l " >/dev/null; } || export LD_LIBRARY_PATH=$W/mingw/hostlib
  done
fi
echo "== MinGW-w64: $(command -v x86_64-w64-mingw32-g++) ${LD_LIBRARY_PATH:+(host libraries from the carry)}"
x86_64-w64-mingw32-g++ -v 2>&1 | tail -2
python3 -m venv $W/venv >/dev/null && $W/venv/bin/pip install -q --no-index --find-links $C/deps cudaredist
CR=$W/venv/bin/cudaredist
echo "== the tree"
$CR install 13.0 --platform windows-x86_64 --profile runtime --base-url $C/mirror --prefix $W/cuda-win \
  --cache-dir $W/cache
$CR env --prefix $W/cuda-win; eval "$($CR env --prefix $W/cuda-win)"
ls $WINDOWS_CUDA_HOME/lib/x64 | tee $W/before
TL=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
echo "== Windows import libraries of this machine's PyTorch (C shim exports)"
$W/venv/bin/python $R/tests/gpu/aoti_windows/shimlibs.py $W/winlibs "$TL"
echo "== AOTInductor export, cross_target_platform=windows"
if ! time python3 $R/tests/gpu/aoti_windows/export.py $W/out $W/winlibs; then
  echo "== again, the shim libraries with PyTorch's C++ symbols too (not how a Windows torch.lib names them)"
  $W/venv/bin/python $R/tests/gpu/aoti_windows/shimlibs.py $W/winlibs-cxx "$TL" --cxx
  rm -rf $W/inductor; time python3 $R/tests/gpu/aoti_windows/export.py $W/out-cxx $W/winlibs-cxx
fi
echo "== what the export added to WINDOWS_CUDA_HOME/lib/x64"; ls $WINDOWS_CUDA_HOME/lib/x64 | diff $W/before - || true
$CR verify --prefix $W/cuda-win
