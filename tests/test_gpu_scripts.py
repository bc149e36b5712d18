"""The GPU checks' scripts (tests/gpu/, run by hand on a lent GPU machine) and README's install lines:
what can be checked without a GPU. Each run stands alone, aoti_windows/run.sh finds ldconfig outside
its PATH, and a prepare step without the checkout's .venv says what to make, before fetching anything."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.hosts import skip_on_windows

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "tests" / "gpu"
CHECKS = sorted(p.name for p in GPU.iterdir() if (p / "run.sh").is_file())


def test_there_are_four_runs() -> None:
    assert CHECKS == ["aoti_windows", "compat", "products", "torch_tree"]


@pytest.mark.parametrize("check", CHECKS)
def test_each_run_stands_alone(check: str) -> None:
    """A run reads only its own carry (build/gpu/<check>), which its own prepare step fills: no run
    depends on what another left on a machine that happened to be warm."""
    run = (GPU / check / "run.sh").read_text(encoding="utf-8")
    prepare = (GPU / check / "prepare.sh").read_text(encoding="utf-8")
    assert set(re.findall(r"build/gpu/(\w+)", run)) == {check}
    assert set(re.findall(r"build/gpu/(\w+)", prepare)) == {check}
    assert not re.search(r"tests/gpu/(?!" + check + r"/|deps\.sh)\w+/prepare\.sh", prepare)
    readme = (GPU / "README.md").read_text(encoding="utf-8")
    assert "left on the machine" not in readme and "right after run 1" not in readme


def test_aoti_run_finds_ldconfig_outside_its_path() -> None:
    """run.sh's PATH has no /sbin (ldconfig's home): the lookup adds /sbin:/usr/sbin."""
    skip_on_windows("a bash script for Linux")
    run = (GPU / "aoti_windows" / "run.sh").read_text(encoding="utf-8")
    path = re.search(r"^export PATH=(\S+)", run, re.M)
    assert path and "sbin" not in path.group(1)
    code = [ln for ln in run.splitlines() if "ldconfig" in ln and not ln.lstrip().startswith("#")]
    lookup = [ln for ln in code if re.match(r"\s*LDCONFIG=", ln)]
    assert len(lookup) == 1
    assert all(ln in lookup or "ldconfig" not in ln.replace('"$LDCONFIG"', "") for ln in code), code
    if not (Path("/sbin/ldconfig").exists() or Path("/usr/sbin/ldconfig").exists()):
        pytest.skip("this host has no ldconfig in /sbin or /usr/sbin to find")
    script = f'export PATH={path.group(1)}; {lookup[0].strip()}; echo "$LDCONFIG"'
    found = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert found.returncode == 0 and found.stdout.strip().endswith("/ldconfig"), found


@pytest.mark.parametrize("check", CHECKS)
def test_prepare_without_the_venv_says_what_to_make(check: str, tmp_path: Path) -> None:
    skip_on_windows("a bash script for Linux")
    shutil.copytree(GPU, tmp_path / "tests" / "gpu")  # a checkout without .venv
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"} | {"PIP_NO_INDEX": "1"}
    r = subprocess.run(["bash", str(tmp_path / "tests" / "gpu" / check / "prepare.sh")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert f"error: {tmp_path}/.venv/bin/python does not exist" in r.stderr
    assert "python3 -m venv .venv && .venv/bin/pip install -e ." in r.stderr
    assert "No such file or directory" not in r.stderr
    assert [p for p in tmp_path.joinpath("build").rglob("*") if p.is_file()] == []


def test_the_readme_installs_without_a_checkout() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    url = "git+https://github.com/<owner>/cudaredist.git@main"
    for line in (f'pipx install "{url}"', f'uv tool install "{url}"', f'pip install "{url}"'):
        assert line in readme
    assert "`uses: <owner>/cudaredist@<ref>`" in readme and "commit SHA" in readme


def test_no_doc_names_a_tag_or_owner_that_does_not_exist() -> None:
    """No `v1` tag backs `OWNER/cudaredist@v1`: the docs say `<owner>/cudaredist@main` (or a SHA)."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    said = {p.name: re.findall(r"\S*cudaredist(?:/cache)?@\S+", p.read_text(encoding="utf-8")) for p in docs}
    wrong = {name: [u for u in uses if "OWNER" in u or not re.search(r"@(main\b|<ref>)", u)]
             for name, uses in said.items()}
    assert {name: uses for name, uses in wrong.items() if uses} == {}
    assert any(said.values())
