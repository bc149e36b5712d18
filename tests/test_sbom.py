"""Issue 47: every install writes the tree's SBOM beside its record; `cudaredist sbom` renders it as
CycloneDX 1.6 or SPDX 2.3, each checked by a validator the project did not write (cyclonedx-python-lib's
strict JSON schema validator, ntia-conformance-checker's NTIA minimum elements), on a redist tree, a
PyPI tree with a product, a cross tree, a tree with a host fix and a redist tree with a product."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from ntia_conformance_checker import SbomChecker
from typer.testing import CliRunner

from cudaredist.cli import app
from tests.archives import build_mirror, toolkit
from tests.hosts import wine_limit
from tests.sources.pypi.test_pypi_products import _run as pypi_run
from tests.sources.pypi.test_pypi_products import add_cudss, add_release_13_0
from tests.sources.pypi.test_pypi_source import FakeIndex
from tests.test_cross import _install as cross_install
from tests.test_cross import cross_site  # noqa: F401
from tests.test_hostfixes import _install as hostfix_install
from tests.test_hostfixes import _mirror as hostfix_mirror
from tests.test_products_install import _linux_host, site  # noqa: F401

# the CycloneDX validator needs jsonschema, whose rpds-py DLL Wine cannot load (a real Windows host can)
pytestmark = wine_limit("the SBOM validators need rpds-py, whose DLL Wine cannot load")


def _sbom(prefix: Path, fmt: str, tmp_path: Path) -> dict[str, Any]:
    """``cudaredist sbom --format fmt -o FILE``, validated by the format's own checker."""
    out = tmp_path / f"sbom.{fmt}.json"
    r = CliRunner().invoke(app, ["sbom", "--prefix", str(prefix), "--format", fmt, "-o", str(out)])
    assert r.exit_code == 0, r.output
    if fmt == "cyclonedx":
        assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(out.read_text()) is None
    else:
        checker = SbomChecker(str(out))
        assert checker.compliant, checker.output_json()
        assert not checker.parsing_errors and not checker.validation_messages
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def _check(prefix: Path, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both formats valid; the installed SBOM valid too, and the same as `sbom`'s apart from its
    timestamp and serial; every component's sha256 its archive's in the record."""
    cdx, spdx = _sbom(prefix, "cyclonedx", tmp_path), _sbom(prefix, "spdx", tmp_path)
    installed = (prefix / ".cudaredist" / "sbom.cdx.json").read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(installed) is None
    stored = json.loads(installed)
    for doc in (stored, cdx):
        del doc["serialNumber"], doc["metadata"]["timestamp"]
    assert stored == cdx
    plan = json.loads((prefix / ".cudaredist" / "record.json").read_text())["plan"]
    want = sorted((c["name"], c["sha256"]) for c in plan["components"])
    assert sorted((c["name"], c["hashes"][0]["content"]) for c in cdx["components"]) == want
    assert sorted((p["name"], p["checksums"][0]["checksumValue"]) for p in spdx["packages"]
                  if p["SPDXID"] != "SPDXRef-toolkit") == want
    assert all(c["supplier"]["name"] == "NVIDIA Corporation" and c["purl"] for c in cdx["components"])
    return cdx, spdx


def _into(tmp_path: Path) -> tuple[str, ...]:
    """--prefix and --cache-dir of a test's tree (tmp_path/cuda)."""
    return "--prefix", str(tmp_path / "cuda"), "--cache-dir", str(tmp_path / "cache")


def _manifest_shas(root: Path) -> set[str]:
    return {hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*-archive.*")}


def test_a_redist_tree_its_verify_and_uninstall(tmp_path: Path) -> None:
    root, prefix = tmp_path / "site", tmp_path / "cuda"
    build_mirror(root, "13.0.1", toolkit("linux-x86_64"))
    args = ["install", "13.0", *_into(tmp_path), "--base-url", str(root), "--platform", "linux-x86_64"]
    assert CliRunner().invoke(app, args).exit_code == 0
    cdx, spdx = _check(prefix, tmp_path)
    assert {c["hashes"][0]["content"] for c in cdx["components"]} <= _manifest_shas(root)
    rt = next(c for c in cdx["components"] if c["name"] == "cuda_cudart")
    assert rt["purl"].startswith("pkg:generic/nvidia/cuda_cudart@13.0.96?checksum=sha256:")
    assert rt["licenses"] == [{"license": {"name": "CUDA Toolkit"}}]
    assert cdx["metadata"]["component"]["version"] == "13.0.1"
    assert spdx["hasExtractedLicensingInfos"][0]["name"] == "CUDA Toolkit"
    sbom = prefix / ".cudaredist" / "sbom.cdx.json"
    assert CliRunner().invoke(app, ["verify", "--prefix", str(prefix)]).exit_code == 0
    sbom.write_text(sbom.read_text().replace(rt["hashes"][0]["content"], "0" * 64))  # a stale SBOM
    r = CliRunner().invoke(app, ["verify", "--prefix", str(prefix)])
    assert r.exit_code == 1 and ".cudaredist/sbom.cdx.json" in r.output
    sbom.unlink()
    r = CliRunner().invoke(app, ["verify", "--prefix", str(prefix)])
    assert r.exit_code == 1 and "missing: `cudaredist install --reinstall` writes it again" in r.output
    assert CliRunner().invoke(app, [*args, "--reinstall"]).exit_code == 0
    assert CliRunner().invoke(app, ["verify", "--prefix", str(prefix)]).exit_code == 0
    assert CliRunner().invoke(app, ["uninstall", "--prefix", str(prefix)]).exit_code == 0
    assert not prefix.exists()  # the SBOM went with the tree


def test_a_pypi_tree_with_a_product(fake_index: FakeIndex, tmp_path: Path) -> None:
    add_release_13_0(fake_index)
    add_cudss(fake_index)
    r = pypi_run("install", "13.0", "--with", "cudss", *_into(tmp_path), "--platform", "linux-x86_64")
    assert r.exit_code == 0, r.output
    cdx, _ = _check(tmp_path / "cuda", tmp_path)
    wheels = {hashlib.sha256(b).hexdigest() for b in fake_index.blobs.values()}
    assert {c["hashes"][0]["content"] for c in cdx["components"]} <= wheels
    cudss = next(c for c in cdx["components"] if c["name"] == "libcudss")
    assert cudss["purl"] == "pkg:pypi/nvidia-cudss-cu13@1.0.0.35"
    assert {"name": "cudaredist:product", "value": "cudss"} in cudss["properties"]


def test_a_redist_tree_with_a_product(site: str, tmp_path: Path) -> None:  # noqa: F811
    r = CliRunner().invoke(app, ["install", "13.0", "--with", "cudnn", *_into(tmp_path), "--base-url", site])
    assert r.exit_code == 0, r.output
    cdx, _ = _check(tmp_path / "cuda", tmp_path)
    cudnn = next(c for c in cdx["components"] if c["name"] == "cudnn")
    assert "/compute/cudnn/redist/" in cudnn["externalReferences"][0]["url"]
    root = cdx["metadata"]["component"]
    assert {"name": "cudaredist:product", "value": "cudnn 9.27.0"} in root["properties"]


def test_a_cross_tree_names_both_platforms(cross_site: Path, tmp_path: Path) -> None:  # noqa: F811
    prefix = tmp_path / "cross"
    assert cross_install(cross_site, prefix, "linux-sbsa", "linux-x86_64").exit_code == 0
    cdx, _ = _check(prefix, tmp_path)
    built = {p["value"] for c in cdx["components"] for p in c["properties"]
             if p["name"] == "cudaredist:platform"}
    assert built == {"linux-sbsa", "linux-x86_64"}
    assert {c["hashes"][0]["content"] for c in cdx["components"]} <= _manifest_shas(cross_site)


def test_a_host_fix_is_a_patch_of_nvidias_bytes(tmp_path: Path) -> None:
    prefix = tmp_path / "cuda"
    hostfix_install(hostfix_mirror(tmp_path / "site"), prefix, "--cache-dir", str(tmp_path / "cache"))
    fixed = json.loads((prefix / ".cudaredist" / "record.json").read_text())["host_fixes"]
    cdx, spdx = _check(prefix, tmp_path)
    crt = next(c for c in cdx["components"] if c["name"] == "cuda_crt")
    patched = {(r["id"], r["name"]) for p in crt["pedigree"]["patches"] for r in p["resolves"]}
    assert patched == {(f["id"], f["path"]) for f in fixed}
    notes = " ".join(a["comment"] for p in spdx["packages"] for a in p.get("annotations", []))
    assert "glibc" in notes
    assert all(f["before"] in notes and f["after"] in notes for f in fixed)


def test_a_warm_install_reuses_the_rendering_without_importing_the_libraries(tmp_path: Path) -> None:
    """The second install of the same archives (another prefix, the same cache) writes the same SBOM
    apart from its timestamp and serial, and imports neither library (issue 47's 5% of a warm install)."""
    root, cache = tmp_path / "site", tmp_path / "cache"
    build_mirror(root, "13.0.1", toolkit("linux-x86_64"))
    args = ["install", "13.0", "--base-url", str(root), "--platform", "linux-x86_64",
            "--cache-dir", str(cache)]
    assert CliRunner().invoke(app, [*args, "--prefix", str(tmp_path / "a")]).exit_code == 0
    probe = ("import atexit, sys\n"
             "atexit.register(lambda: print(sorted(m for m in sys.modules if m.split('.')[0] in "
             "('cyclonedx', 'spdx_tools', 'packageurl'))))\n"
             "sys.argv = ['cudaredist', *sys.argv[1:]]\nfrom cudaredist.entry import main\nmain()\n")
    r = subprocess.run([sys.executable, "-c", probe, *args, "--prefix", str(tmp_path / "b"), "--quiet"],
                       capture_output=True, text=True, check=False, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
    a, b = (json.loads((tmp_path / p / ".cudaredist" / "sbom.cdx.json").read_text()) for p in "ab")
    assert a["serialNumber"] != b["serialNumber"]
    for doc in (a, b):
        del doc["serialNumber"], doc["metadata"]["timestamp"]
    assert a == b
    assert len(list((cache / "sbom").iterdir())) == 1  # one rendering, which `cache clear` removes
    assert CliRunner().invoke(app, ["cache", "clear", "--cache-dir", str(cache)]).exit_code == 0
    assert not (cache / "sbom").exists()


def test_spdx_without_its_extra_is_one_paragraph(tmp_path: Path) -> None:
    """spdx-tools is the spdx extra: where it is missing, --format spdx says how to add it (exit 1, no
    traceback) and CycloneDX still works."""
    root, prefix = tmp_path / "site", tmp_path / "p"
    build_mirror(root, "13.0.1", toolkit("linux-x86_64"))
    args = ["install", "13.0", "--base-url", str(root), "--platform", "linux-x86_64",
            "--cache-dir", str(tmp_path / "cache"), "--prefix", str(prefix)]
    assert CliRunner().invoke(app, args).exit_code == 0
    probe = ("import sys\nsys.modules['spdx_tools'] = None  # what an install without the extra has\n"
             "sys.argv = ['cudaredist', *sys.argv[1:]]\nfrom cudaredist.entry import main\nmain()\n")
    runs = {fmt: subprocess.run([sys.executable, "-c", probe, "sbom", "--prefix", str(prefix),
                                 "--format", fmt], capture_output=True, text=True, check=False, timeout=300)
            for fmt in ("spdx", "cyclonedx")}
    assert runs["spdx"].returncode == 1 and "Traceback" not in runs["spdx"].stderr
    assert "cudaredist[spdx]" in runs["spdx"].stderr and runs["spdx"].stdout == ""
    assert runs["cyclonedx"].returncode == 0
    assert json.loads(runs["cyclonedx"].stdout)["bomFormat"] == "CycloneDX"
