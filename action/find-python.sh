# Find a Python >= 3.10 for the cudaredist actions (sourced by their first step, in bash).
# Order: $CUDAREDIST_PYTHON, the Python that actions/setup-python set up ($pythonLocation), then
# python3, python and the Windows launcher `py -3` on PATH. Writes python=<its sys.executable> to
# $GITHUB_OUTPUT, or fails the step with an ::error:: that says what was tried and what to do.
tried=()
found=""
try_python() {  # try_python LABEL CMD...: the interpreter's own path when it is 3.10+
  local label=$1 out
  shift
  if ! command -v "$1" >/dev/null 2>&1; then tried+=("$label (not found)"); return 1; fi
  out=$("$@" -c 'import sys; print(sys.executable if sys.version_info >= (3, 10) else "old " + sys.version.split()[0])' 2>/dev/null) ||
    out=""
  out=${out%$'\r'}  # a Windows Python ends its line with CR LF
  if [ -n "$out" ] && [ "${out#old }" = "$out" ]; then
    found=$out
    return 0
  fi
  tried+=("$label (${out:-does not run})")
  return 1
}
{ [ -n "${CUDAREDIST_PYTHON:-}" ] && try_python "CUDAREDIST_PYTHON=$CUDAREDIST_PYTHON" "$CUDAREDIST_PYTHON"; } ||
  { [ -n "${pythonLocation:-}" ] && { try_python "\$pythonLocation/python" "$pythonLocation/python" ||
                                      try_python "\$pythonLocation/python.exe" "$pythonLocation/python.exe"; }; } ||
  try_python python3 python3 || try_python python python || try_python "py -3" py -3 || true
if [ -z "$found" ]; then
  list=$(printf '%s, ' "${tried[@]}")
  echo "::error title=cudaredist found no Python 3.10+::The cudaredist action runs on Python 3.10 or newer and found none on this runner (tried ${list%, }). Add a step 'uses: actions/setup-python@v5' with 'python-version: \"3.12\"' before this one, install Python 3.10+ on the runner, or set CUDAREDIST_PYTHON to one."
  exit 1
fi
echo "Python for cudaredist: $found"
echo "python=$found" >> "$GITHUB_OUTPUT"
