"""What .github/workflows/ci.yml claims against what the suite does: the real-manifest tests get
NVIDIA's manifests (.ci/fetch-manifests.py into the folder tests/conftest.py reads), macOS gets the
shells tests/test_env.py needs, and Windows builds the mirror tests/windows/test_windows_e2e.py
installs from. The runners cannot be reached from here, so the workflow's shape is checked, and the
fetch script is run for real against a loopback server laid out as NVIDIA's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import MANIFESTS_VAR, SHARED, SHARED_MANIFESTS
from tests.loopback import directory_handler, serving

yaml = pytest.importorskip("yaml")
ROOT = Path(__file__).resolve().parents[1]
FETCH = ROOT / ".ci" / "fetch-manifests.py"
LIST = ROOT / ".ci" / "manifests.txt"


def _test_job() -> dict[str, object]:
    ci = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8"))
    job: dict[str, object] = ci["jobs"]["test"]
    return job


def _steps() -> list[dict[str, str]]:
    steps = _test_job()["steps"]
    assert isinstance(steps, list)
    return steps


def _index(pred: object) -> int:
    found = [i for i, s in enumerate(_steps()) if callable(pred) and pred(s)]
    assert found, "no such step in ci.yml's test job"
    return found[0]


def _runs_tests(step: dict[str, str]) -> bool:
    return "bash .ci/run" in step.get("run", "") or "pytest" in step.get("run", "")


def test_the_manifests_are_fetched_where_the_tests_read_them() -> None:
    env = _test_job()["env"]
    assert isinstance(env, dict)
    where = env[MANIFESTS_VAR]
    # the checkout's ../shared/redist/manifests: the folder conftest reads when the variable is unset
    assert where == "${{ github.workspace }}/../shared/redist/manifests"
    in_checkout = Path(where.replace("${{ github.workspace }}", str(ROOT))).resolve()
    assert in_checkout == (SHARED / "redist" / "manifests").resolve()
    fetch = _index(lambda s: ".ci/fetch-manifests.py" in s.get("run", ""))
    assert f'--out "${{{{ env.{MANIFESTS_VAR} }}}}"' in _steps()[fetch]["run"]
    assert "if" not in _steps()[fetch]  # every OS of the matrix
    installs = _index(lambda s: "pip install -e" in s.get("run", "") and "if" not in s)
    runs = [i for i, s in enumerate(_steps()) if _runs_tests(s)]
    assert runs and installs < fetch < min(runs)
    # .ci/run runs as root through sudo, which passes on only the variables it is given
    dot_ci = next(s["run"] for s in _steps() if "bash .ci/run" in s.get("run", ""))
    assert f'"{MANIFESTS_VAR}=${MANIFESTS_VAR}"' in dot_ci


def test_conftest_reads_the_variable(tmp_path: Path) -> None:
    # the checkout on sys.path by hand: the Windows CPython's ._pth file ignores PYTHONPATH and the cwd
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
            "from tests.conftest import SHARED_MANIFESTS; print(SHARED_MANIFESTS)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, MANIFESTS_VAR: str(tmp_path / "m")}, timeout=120)
    assert (r.returncode, r.stdout.strip()) == (0, str(tmp_path / "m")), r.stderr


def test_the_list_is_what_the_tests_read_here() -> None:
    """.ci/manifests.txt names every manifest of ../shared (what the tests were written against)."""
    listed = [ln for ln in LIST.read_text(encoding="utf-8").splitlines() if ln and not ln.startswith("#")]
    assert len(listed) == len(set(listed)) and all(re.fullmatch(r"([a-z][a-z-]*/)?redistrib_[\d.]+\.json", n)
                                                   for n in listed), listed
    if not SHARED_MANIFESTS.is_dir():
        pytest.skip(f"{SHARED_MANIFESTS} is absent: nothing to compare the list with")
    here = sorted(p.relative_to(SHARED_MANIFESTS).as_posix()
                  for p in SHARED_MANIFESTS.rglob("redistrib_*.json"))
    assert sorted(listed) == here


def _nvidia_shaped(root: Path, files: dict[str, bytes]) -> None:
    """``files`` (as .ci/manifests.txt names them) laid out as NVIDIA's server: compute/cuda/redist/
    for CUDA's, compute/<product>/redist/ for a product's."""
    for rel, data in files.items():
        product, _, name = rel.rpartition("/")
        dest = root / "compute" / (product or "cuda") / "redist" / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)


def _fetch(base: str, listing: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(FETCH), "--base-url", base, "--list", str(listing),
                           "--out", str(out)], capture_output=True, text=True, timeout=120)


def test_the_fetch_step_fills_a_folder_shaped_like_shared(tmp_path: Path) -> None:
    files = {"redistrib_13.0.2.json": json.dumps({"release_label": "13.0.2"}).encode(),
             "cudnn/redistrib_9.13.0.json": json.dumps({"release_label": "9.13.0"}).encode()}
    _nvidia_shaped(tmp_path / "www", files)
    listing = tmp_path / "list.txt"
    listing.write_text("# a comment\n" + "\n".join(files) + "\n")
    with serving(directory_handler(tmp_path / "www")) as url:
        r = _fetch(f"{url}compute/cuda/redist/", listing, tmp_path / "out")
        assert r.returncode == 0, r.stderr
        assert {p.relative_to(tmp_path / "out").as_posix(): p.read_bytes()
                for p in (tmp_path / "out").rglob("*") if p.is_file()} == files
        listing.write_text("\n".join([*files, "cutensor/redistrib_2.8.1.json"]) + "\n")
        r = _fetch(f"{url}compute/cuda/redist/", listing, tmp_path / "out")
    assert r.returncode == 1 and "2 of 3 manifests" in r.stdout
    assert f"cutensor/redistrib_2.8.1.json ({url}compute/cutensor/redist/redistrib_2.8.1.json)" in r.stderr
    assert "Traceback" not in r.stderr


def test_macos_gets_fish_before_the_tests() -> None:
    """tests/test_env.py runs `cudaredist env` through zsh and fish; under CI=true a missing one fails."""
    fish = _index(lambda s: s.get("if") == "runner.os == 'macOS'" and "brew install fish" in s.get("run", ""))
    pytest_step = _index(lambda s: "pytest" in s.get("run", "") and s.get("if") == "runner.os != 'Linux'")
    assert fish < pytest_step


def test_windows_builds_the_mirror_the_e2e_module_needs() -> None:
    """The module fails (not skips) under CI=true without its mirror: the job builds one first."""
    from tests.windows import test_windows_e2e as e2e

    source = Path(e2e.__file__).read_text(encoding="utf-8")
    label = re.search(r'redistrib_(\d+\.\d+\.\d+)\.json"\)\.is_file\(\)', source)
    assert label and 'pytest.fail(f"{MIRROR_VAR} is not set although CI is set' in source
    mirror = _index(lambda s: s.get("if") == "runner.os == 'Windows'" and " mirror " in s.get("run", ""))
    run = _steps()[mirror]["run"]
    assert f"mirror {label.group(1)} --source pypi" in run and "--platform windows-x86_64" in run
    assert f"{e2e.MIRROR_VAR}=" in run and '"$GITHUB_ENV"' in run
    pytest_step = _index(lambda s: "pytest" in s.get("run", "") and s.get("if") == "runner.os != 'Linux'")
    assert mirror < pytest_step
    text = (ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8")
    assert "skipped here" not in text  # what it once said of tests that fail there
