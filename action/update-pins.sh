#!/usr/bin/env bash
# Pin the dependencies the action installs (action/requirements.txt): every version for every runner
# (Linux, Windows, macOS; Python 3.10 and newer), each with the sha256 of every file the index has.
# Run after changing [project] dependencies in pyproject.toml; tests/test_action_steps.py fails until then.
set -euo pipefail
cd "$(dirname "$0")/.."
uv=$(command -v uv || echo .venv/bin/uv)
"$uv" pip compile pyproject.toml --universal --generate-hashes --python-version 3.10 --quiet \
  --custom-compile-command action/update-pins.sh -o action/requirements.txt
