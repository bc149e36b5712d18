#!/usr/bin/env bash
# On the GPU machine (no network; a data-center GPU on an R580 driver): cudaredist's forward-
# compatibility decision (cudaredist/compat.py) against the real driver, and what it predicts:
#   1. a 13.0 tree needs no compat (its compat package stays off: the driver runs 13.0 natively);
#   2. a 13.5 tree installed `--with compat` (the stand-in 620.70.06, newer than the driver) gets it first;
#   3. a compat package older than the driver (this image's real /usr/local/cuda-13.0/compat,
#      580.95.05) is refused by auto; forced with --compat on, a program that runs without it fails
#      with 803 (cudaErrorSystemDriverMismatch);
#   4. a 13.5 program built as PTX only fails, with no compat, with 222 (cudaErrorUnsupportedPtxVersion)
#      exactly as doctor predicts, and its SASS build runs.
set -euo pipefail
R=$(pwd); C=$R/build/gpu/compat; W=/tmp/crc; rm -rf $W; mkdir -p $W
[ -d "$C/deps" ] || { echo "error: $C is missing: run tests/gpu/compat/prepare.sh and carry build/gpu/compat" >&2; exit 2; }
export PATH=/opt/torch/.venv/bin:/usr/bin:/bin; unset CUDA_HOME CUDA_PATH LD_LIBRARY_PATH
python3 -m venv $W/venv >/dev/null && $W/venv/bin/pip install -q --no-index --find-links $C/deps cudaredist
CR=$W/venv/bin/cudaredist; OLD=${CUDAREDIST_OLD_COMPAT:-/usr/local/cuda-13.0/compat}  # the image's, older than its driver
head -1 /proc/driver/nvidia/version || true
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader || true
ls $OLD
fail() { echo "FAILED: $*" >&2; exit 1; }
first() { $CR env --prefix "$1" --json "${@:2}" | $W/venv/bin/python -c \
  'import json,sys; j=json.load(sys.stdin); print(j["prepend"]["LD_LIBRARY_PATH"][0]); print(j["compat"]["reason"])'; }
for t in 13.0.2:t130 13.5.0:old135; do
  $CR install ${t%%:*} --profile runtime --prefix $W/${t#*:} --base-url $C/mirror --cache-dir $W/cache -q
done
$CR install 13.5.0 --profile runtime --with compat --prefix $W/t135 --base-url $C/mirror --cache-dir $W/cache -q
$CR install 13.5.0 --profile runtime --install-dir $W/managed --base-url $C/mirror --cache-dir $W/cache -q
OLDV=$(basename $OLD/libcuda.so.*.*); OLDV=${OLDV#libcuda.so.}
python3 $R/tests/gpu/compat/addcompat.py $W/t130 $OLD $OLDV 13.0
python3 $R/tests/gpu/compat/addcompat.py $W/old135 $OLD $OLDV 13.0

echo "== 1. a 13.0 tree needs no compat"
out=$(first $W/t130); echo "$out"; [ "$(head -1 <<<"$out")" = $W/t130/lib ] || fail "13.0: compat put first"
grep -q "runs CUDA 13.0 natively" <<<"$out" || fail "13.0: not said native"
(eval "$($CR env --prefix $W/t130)"; $C/sass_90) || fail "13.0 env: a SASS program does not run"

echo "== 2. a 13.5 tree with a compat package newer than the driver: compat first"
out=$(first $W/t135); echo "$out"; [ "$(head -1 <<<"$out")" = $W/t135/compat ] || fail "13.5: compat not first"
[ "$(first $W/t135 --compat off | head -1)" = $W/t135/lib ] || fail "--compat off: compat first"

echo "== 3. a compat package older than the driver: auto refuses it; --compat on gives 803"
out=$(first $W/old135); echo "$out"; [ "$(head -1 <<<"$out")" = $W/old135/lib ] || fail "old compat put first"
grep -q "error 803" <<<"$out" || fail "the refusal does not name 803"
(eval "$($CR env --prefix $W/old135)"; $C/sass_90) || fail "auto: the SASS program does not run"
set +e; forced=$(eval "$($CR env --prefix $W/old135 --compat on 2>/dev/null)"; $C/sass_90); rc=$?; set -e
echo "--compat on: $forced (exit $rc)"
[ $rc -ne 0 ] && grep -q "cudaErrorSystemDriverMismatch (803)" <<<"$forced" || fail "--compat on: no 803"

echo "== 4. a 13.5 PTX-only program fails without compat as doctor predicts"
set +e; $CR doctor 13.5 --install-dir $W/managed > $W/doctor.txt; set -e; cat $W/doctor.txt
grep -q "compat .*PTX-only ones fail with cudaErrorUnsupportedPtxVersion (222)" $W/doctor.txt || fail "doctor: no 222"
set +e; ptx=$($CR run 13.5 --install-dir $W/managed -- $C/ptx_only); rc=$?; set -e
echo "cudaredist run 13.5 -- ptx_only: $ptx (exit $rc)"
[ $rc -ne 0 ] && grep -q "cudaErrorUnsupportedPtxVersion (222)" <<<"$ptx" || fail "PTX-only: not 222"
$CR run 13.5 --install-dir $W/managed -- $C/sass_90 || fail "the SASS build does not run"
echo "== doctor on the 13.5 tree installed --with compat (the stand-in)"
$CR doctor --prefix $W/t135 || true
echo "compat check: all four cases as predicted"
