#!/usr/bin/env bash
# The suite's Windows host: the official Windows CPython 3.13 under Wine (../shared/tools/wine-python.sh,
# or .ci/wine-python.sh, a copy of it, where ../shared is absent) with this checkout's wheel and the
# test dependencies installed for win_amd64 (the spdx extra too), in .winpy/ (.winpy/python runs it).
# tests/test_windows_host.py runs the suite and tests/windows/ under it, and refuses a stale wheel:
# run this again after changing cudaredist/ (about 15 s once .winpy exists, 40 s the first time).
set -euo pipefail
cd "$(dirname "$0")/.."
tool=../shared/tools/wine-python.sh
[ -f "$tool" ] || tool=.ci/wine-python.sh
dist=$(mktemp -d)
trap 'rm -rf "$dist"' EXIT
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$dist" . 2>/dev/null \
  || python3 -m pip wheel -q --no-deps -w "$dist" .
site=.winpy/prefix/drive_c/py313/Lib/site-packages
rm -rf "$site"/cudaredist "$site"/cudaredist-*.dist-info   # one version number for every commit
bash "$tool" setup .winpy "$(ls "$dist"/cudaredist-*.whl)" \
  pytest pytest-timeout respx hypothesis psutil pyyaml cryptography spdx-tools ntia-conformance-checker >/dev/null 2> >(grep -v -e "^WARNING: Location" -e "as the .root. user" >&2)
