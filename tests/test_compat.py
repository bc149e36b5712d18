"""cudaredist.compat.decide, the forward-compatibility decision env, run, the action and doctor take:
each of NVIDIA's conditions fed a fake driver (a DriverInfo as the probe would give it), and the
commands rendering it (env puts compat/ first only when decided; nothing is written outside the
prefix)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cudaredist import compat
from cudaredist.cli import app
from cudaredist.compat import Branches, Device, DriverInfo, decide, driver_branches
from cudaredist.doctor.driver import check_compat
from cudaredist.errors import UsageError

H100 = Device(0, "NVIDIA H100 80GB HBM3", 9, 0)
runner = CliRunner()


def host(kernel: str = "580.159.04", version: int | None = 13000, *devices: Device, loaded: bool = True,
         path: str = "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04") -> DriverInfo:
    return DriverInfo("libcuda.so.1", loaded, path, "", version, 0, 0, devices or (H100,), "", kernel)


def tree(tmp_path: Path, compat_release: str | None = "620.70.06", release: str = "13.5.0",
         date: str = "2026-11-04") -> tuple[Path, dict[str, Any]]:
    """A prefix with compat/ and the plan its record holds (as `install --with compat` writes it)."""
    products = []
    if compat_release:
        (tmp_path / "compat").mkdir(parents=True, exist_ok=True)
        products = [{"name": "compat", "release": compat_release, "cuda_variant": release[:4],
                     "requested": "compat", "base_url": "https://example.invalid/"}]
    return tmp_path, {"release": release, "release_date": date, "platform": "linux-x86_64",
                      "products": products}


def test_auto_puts_a_newer_compat_first_where_every_condition_holds(tmp_path: Path) -> None:
    d = decide(*tree(tmp_path), host())
    assert d.first and d.directory == str(tmp_path / "compat") and d.runs == "compat"
    assert "580.159.04" in d.reason and "620.70.06" in d.reason and "\n" not in d.reason


@pytest.mark.parametrize(("driver", "words"), [
    (host(version=13050), "natively"),                                       # the driver runs 13.5 itself
    (host(loaded=False, version=None), "no NVIDIA driver"),
    (host(kernel=""), "version is unknown"),
    (host("620.70.10", 13000), "error 803"),                                 # not newer than the driver
    (host("580.159.04", 13000, Device(0, "NVIDIA GeForce RTX 4090", 8, 9)), "error 804"),
    (host("580.159.04", 13000, H100, Device(1, "NVIDIA TITAN V", 7, 0)), "error 804"),  # every GPU counts
    (host("580.159.04", 13000, Device(0, "Tesla V100-SXM2-16GB", 7, 0)), "compute capability 7.0"),
    (host("575.57.08", 12090), "New Feature Branch"),
    (host("560.35.03", 12060), "not in NVIDIA's branch matrix"),
    (host("535.261.03", 12020), "end of life (2026-06)"),                     # R535 ended before 13.5
])
def test_auto_leaves_it_off_and_says_why(tmp_path: Path, driver: DriverInfo, words: str) -> None:
    d = decide(*tree(tmp_path), driver)
    assert not d.first and words in d.reason and "\n" not in d.reason


def test_a_host_without_gpus_leaves_it_off(tmp_path: Path) -> None:
    info = DriverInfo("libcuda.so.1", True, "", "", 13000, 0, 0, (), "", "580.159.04")
    assert not decide(*tree(tmp_path), info).first


def test_geforce_says_to_upgrade_the_driver(tmp_path: Path) -> None:
    d = decide(*tree(tmp_path), host("570.86.10", 12080, Device(0, "NVIDIA GeForce RTX 3090", 8, 6)))
    assert d.runs == "none" and "cannot use forward compatibility" in d.fix and "R620 or newer" in d.fix


def test_the_cc_floor_is_the_compat_branchs(tmp_path: Path) -> None:
    """r590+ compat drivers dropped Volta; an R580 compat package still runs on it (R570 host)."""
    volta = Device(0, "Tesla V100-SXM2-16GB", 7, 0)
    prefix, plan = tree(tmp_path, "580.95.05", "13.0.2", "2025-10-01")
    assert decide(prefix, plan, host("570.172.08", 12080, volta)).first
    assert not decide(*tree(tmp_path / "new"), host("570.172.08", 12080, volta)).first


def test_a_compat_libcuda_already_loaded_is_not_taken_for_the_hosts(tmp_path: Path) -> None:
    """LD_LIBRARY_PATH naming compat/ loads its libcuda (13.5): the kernel module decides, not it."""
    prefix, plan = tree(tmp_path)
    d = decide(prefix, plan, host(version=13050, path=str(tmp_path / "compat" / "libcuda.so.620.70.06")))
    assert d.first


def test_on_and_off_override(tmp_path: Path) -> None:
    prefix, plan = tree(tmp_path, "580.95.05")
    forced = decide(prefix, plan, host(), "on")
    assert forced.first and "error 803" in forced.reason  # the user's call, said
    assert not decide(prefix, plan, host(version=12080), "off").first
    with pytest.raises(UsageError, match="--with compat"):
        decide(*tree(tmp_path / "bare", None), host(), "on")
    with pytest.raises(UsageError, match="auto, on, off"):
        decide(prefix, plan, host(), "yes")


def test_without_compat_doctor_is_told_what_would_help(tmp_path: Path) -> None:
    prefix, plan = tree(tmp_path, None)
    d = decide(prefix, plan, host())
    assert not d.first and d.runs == "sass" and d.fix == "install with `--with compat`"
    check = check_compat(d, "13.5.0")
    assert check.status == "warn" and "(222)" in check.detail and "--with compat" in check.fix
    older = decide(prefix, plan, host("535.261.03", 12020))  # another major: nothing runs
    assert older.runs == "none" and check_compat(older, "13.5.0").status == "fail"
    assert check_compat(decide(*tree(tmp_path / "ok"), host()), "13.5.0").status == "ok"


def test_the_table_is_data(tmp_path: Path) -> None:
    real = driver_branches()
    assert real.kinds[580] == ("lts", "2028-06") and real.min_cc[590] == (7, 5)
    assert "GeForce" in real.no_compat_gpus
    strict = Branches(real.cuda, {580: ("feature", "")}, (), {})
    assert not decide(*tree(tmp_path), host(), branches=strict).first
    (bad := tmp_path / "drivers.toml").write_text("[branch]\n580 = { eol = '2028-06' }\n")
    with pytest.raises(Exception, match="cannot read"):
        driver_branches(bad)


def test_for_tree_probes_no_driver_for_a_tree_without_compat(tmp_path: Path) -> None:
    def probe() -> DriverInfo:
        raise AssertionError("probed")

    assert not compat.for_tree(*tree(tmp_path, None), probe=probe).first
    assert compat.for_tree(*tree(tmp_path / "c"), probe=host).first


@pytest.fixture
def compat_tree(tmp_path: Path) -> Path:
    """A tiny 13.0.1 tree installed by cudaredist, with a compat package 580.95.05 in its record."""
    from tests.archives import build_mirror, toolkit

    build_mirror(tmp_path / "mirror", "13.0.1", toolkit())
    prefix = tmp_path / "cuda"
    r = runner.invoke(app, ["install", "13.0", "--prefix", str(prefix), "--platform", "linux-x86_64",
                            "--base-url", str(tmp_path / "mirror"), "-q"])
    assert r.exit_code == 0, r.stderr
    rec_path = prefix / ".cudaredist" / "record.json"
    rec = json.loads(rec_path.read_text())
    rec["plan"]["products"] = tree(prefix, "580.95.05", "13.0.1")[1]["products"]
    rec_path.write_text(json.dumps(rec))
    return prefix


@pytest.mark.skipif(os.name == "nt", reason="a Linux tree's environment")
def test_env_and_doctor_render_the_decision(compat_tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix, tmp_path = compat_tree, compat_tree.parent
    monkeypatch.setattr(compat, "probe_driver", lambda *a, **k: host())
    before = sorted(p.name for p in tmp_path.iterdir())

    def ld_path(*args: str) -> list[str]:
        r = runner.invoke(app, ["env", "--prefix", str(prefix), "--json", *args])
        assert r.exit_code == 0, r.stderr
        return list(json.loads(r.stdout)["prepend"]["LD_LIBRARY_PATH"])

    assert ld_path()[0] == str(prefix / "lib")  # auto: older than the driver, refused (803)
    assert ld_path("--compat", "on")[0] == str(prefix / "compat")
    r = runner.invoke(app, ["env", "--prefix", str(prefix)])
    assert r.stderr == "note: compat: the host driver 580.159.04 runs CUDA 13.0 natively: compat not needed\n"
    r = runner.invoke(app, ["doctor", "--prefix", str(prefix), "--json"])
    said = {c["name"]: c for c in json.loads(r.stdout)["checks"]}["compat"]
    assert said["status"] == "ok" and said["detail"].startswith("CUDA 13.0.1 programs run natively")
    r = runner.invoke(app, ["env", "--prefix", str(prefix), "--compat", "sometimes"])
    assert r.exit_code == 2 and "auto, on, off" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written beside the prefix


def test_the_compat_version_is_the_cuda_compat_components(tmp_path: Path) -> None:
    """--with compat records the cuda_compat component at the driver's version (CUDA 13.1-13.3 list it in
    their own manifest, where the product's release names the CUDA release)."""
    prefix, plan = tree(tmp_path, "13.2.1", "13.2.1", "2026-05-01")
    plan["components"] = [{"name": "cuda_compat", "version": "595.45.04"}]
    d = decide(prefix, plan, host("580.159.04", 13000))
    assert d.first and "595.45.04" in d.reason


@pytest.mark.skipif(os.name == "nt", reason="a Linux tree")
def test_doctor_passes_a_driver_the_compat_package_runs(compat_tree: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """An R535 host (CUDA 12.2) with a 13.0 tree and a newer compat package: the driver is too old for
    CUDA 13 by itself, and the compat package runs it, so doctor's driver check does not fail."""
    prefix = compat_tree
    monkeypatch.setattr(compat, "probe_driver", lambda *a, **k: host("535.261.03", 12020))
    said = runner.invoke(app, ["doctor", "--prefix", str(prefix), "--json"]).stdout
    checks = {c["name"]: c for c in json.loads(said)["checks"]}
    assert checks["compat"]["status"] == "ok" and "with the tree's compat" in checks["compat"]["detail"]
    assert checks["driver"]["status"] == "ok" and "compat package runs them" in checks["driver"]["detail"]
    off = runner.invoke(app, ["doctor", "--prefix", str(prefix), "--json", "--compat", "off"])
    assert {c["name"]: c["status"] for c in json.loads(off.stdout)["checks"]}["driver"] == "fail"


@pytest.mark.skipif(sys.platform != "linux", reason="builds an ELF driver stub")
@pytest.mark.parametrize(("stub", "driver", "gpu", "reason"), [
    pytest.param({"has_version": False}, ("fail", "is not a working CUDA driver: not a CUDA driver library"),
                 ("warn", "no GPU can be seen without a driver"),
                 "no NVIDIA driver here: nothing for a compat package to run on", id="no-cuDriverGetVersion"),
    pytest.param({"init": 999}, ("fail", "but cuInit failed with 999 (CUDA_ERROR_UNKNOWN)"),
                 ("fail", "no usable GPU: cuInit returned 999 (CUDA_ERROR_UNKNOWN)"),
                 "no GPU visible: nothing to run compat on", id="cuInit-999"),
    pytest.param({"count_result": 101}, ("ok", "supports CUDA 13.0 (cuDriverGetVersion 13000); cuInit ok"),
                 ("fail", "the driver could not list the GPUs: cuDeviceGetCount returned 101 "
                          "(CUDA_ERROR_INVALID_DEVICE)"),
                 "the host driver 535.261.03 runs CUDA 13.0 natively: compat not needed", id="device-query"),
])
def test_a_broken_driver_library_gives_env_and_doctor_a_verdict(
        compat_tree: Path, monkeypatch: pytest.MonkeyPatch, stub: dict[str, Any], driver: tuple[str, str],
        gpu: tuple[str, str], reason: str) -> None:
    """A real dlopen of a gcc-built libcuda stub that lacks cuDriverGetVersion, whose cuInit fails with a
    CUresult doctor has no special words for, or whose device query fails: env decides compat with a
    reason that names the real cause (never "runs natively" on a driver that cannot initialise), doctor
    gives each check a verdict line, and neither raises."""
    from tests.test_doctor import build_stub

    prefix, tmp_path = compat_tree, compat_tree.parent
    lib = build_stub(tmp_path / "driver", **stub)
    proc = tmp_path / "proc-version"
    proc.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.261.03  Release Build\n")
    probe = compat.probe_driver
    monkeypatch.setattr(compat, "probe_driver", lambda *a, **k: probe(str(lib), proc_file=str(proc)))
    r = runner.invoke(app, ["env", "--prefix", str(prefix), "--json"])
    assert r.exit_code == 0 and r.exception is None, r.stderr
    assert json.loads(r.stdout)["compat"] == {"first": False, "reason": reason}
    r = runner.invoke(app, ["doctor", "--prefix", str(prefix), "--json"])
    assert r.exit_code == 1 and not isinstance(r.exception, Exception)  # a verdict, not a traceback
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert (checks["driver"]["status"], checks["gpu"]["status"]) == (driver[0], gpu[0])
    assert driver[1] in checks["driver"]["detail"] and gpu[1] in checks["gpu"]["detail"]
    assert checks["compat"]["detail"].endswith(reason)
    assert (checks["compat"]["status"] == "ok") == (driver[0] == "ok")  # never "runs natively" on a dead one
