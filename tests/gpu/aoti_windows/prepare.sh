#!/usr/bin/env bash
# Here, with PyPI and Debian's archive in reach: what tests/gpu/aoti_windows/run.sh needs on the GPU
# machine, in build/gpu/aoti_windows/ (ignored by git; about 35 MB, one carry):
#   deps/          the cudaredist wheel and its dependencies (this Python and CPython 3.12)
#   mirror/        CUDA 13.0.2's Windows runtime profile (cudart, crt: NVIDIA's binaries from their
#                  wheels) as a redist-shaped mirror, installed there as from NVIDIA's server
#   mingw.tar.xz   Debian 12's MinGW-w64 (g++ posix, binutils, headers, CRT, gendef) unpacked, without
#                  what a C++ DLL build does not use, plus the host libraries cc1plus loads (isl, mpc,
#                  mpfr), used only where the GPU machine has no x86_64-w64-mingw32-g++ of its own
set -euo pipefail
R=$(cd "$(dirname "$0")/../../.." && pwd); cd "$R"
O=build/gpu/aoti_windows; PY=${PYTHON:-$R/.venv/bin/python}  # one with this checkout's cudaredist
rm -rf $O; mkdir -p $O
bash tests/gpu/deps.sh $O/deps  # first: without the checkout's .venv it says what to make
$PY -m cudaredist mirror 13.0.2 --source pypi --profile runtime --platform windows-x86_64 --out $O/mirror -q
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
(cd "$T" && apt-get download -q g++-mingw-w64-x86-64-posix gcc-mingw-w64-x86-64-posix \
   gcc-mingw-w64-x86-64-posix-runtime gcc-mingw-w64-base binutils-mingw-w64-x86-64 mingw-w64-x86-64-dev \
   mingw-w64-common mingw-w64-tools libisl23 libmpc3 libmpfr6 >/dev/null)
M=$T/mingw; mkdir -p $M/hostlib
for d in "$T"/*.deb; do
  case $(basename "$d") in lib*) dpkg -x "$d" "$T/host";; *) dpkg -x "$d" $M;; esac
done
cp -a "$T"/host/usr/lib/x86_64-linux-gnu/lib*.so.* $M/hostlib/
G=$M/usr/lib/gcc/x86_64-w64-mingw32/12-posix
rm -rf $G/lto1 $G/plugin $G/adalib $G/adainclude $G/libgfortran* $G/libgnat* $G/libstdc++-6.dll \
  $M/usr/bin/*lto-dump* $M/usr/share/doc $M/usr/share/man $M/usr/share/lintian $M/usr/share/mingw-w64/include/ddk
ln -s x86_64-w64-mingw32-g++-posix $M/usr/bin/x86_64-w64-mingw32-g++  # what update-alternatives makes
ln -s x86_64-w64-mingw32-gcc-posix $M/usr/bin/x86_64-w64-mingw32-gcc
tar -C "$T" -cf - mingw | xz -T0 -6 > $O/mingw.tar.xz
du -sh $O/*; du -sh $O
