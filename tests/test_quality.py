"""The code stays typed and linted: mypy --strict and ruff run as part of the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, text=True, capture_output=True,
                          timeout=600)


def test_mypy_strict_passes() -> None:
    r = run("mypy", "cudaredist", "action/steps.py")  # the actions' steps too (stdlib only)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_passes() -> None:
    r = run("ruff", "check", "cudaredist", "tests", "benchmarks", "action")
    assert r.returncode == 0, r.stdout + r.stderr


def test_fast_start_imports_nothing_heavy() -> None:
    """`--help` and the no-op path must not pay for httpx, tqdm or the archive modules."""
    code = ("import sys; from cudaredist import cli; "
            "print(' '.join(m for m in ('httpx', 'tqdm', 'tarfile', 'zipfile', 'truststore', 'pydantic', "
            "'rich', 'packaging') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], text=True, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == []
