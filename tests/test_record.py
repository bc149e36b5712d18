"""The install record and the commands that read it: verify, info, uninstall."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import filelock
import pytest
from typer.testing import CliRunner

from cudaredist.cli import app
from cudaredist.prefixes import uninstall, verify
from cudaredist.record import read_record, record_path
from tests.hosts import needs_symlinks, symlinks_work
from tests.invariants import snapshot

runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture
def prefix(mirror: Path, tmp_path: Path) -> Path:
    p = tmp_path / "inst" / "cuda"
    code, _, err = cli("install", "13.0", "--prefix", str(p), "--platform", "linux-x86_64",
                       "--base-url", str(mirror), "-q")
    assert code == 0, err
    return p


def test_record_lists_every_file_and_link(prefix: Path) -> None:
    rec = read_record(prefix)
    assert rec is not None
    files = {f["path"]: f for f in rec["files"]}
    assert files["lib/libcudart.so"]["link"] == "libcudart.so.13"
    assert files["bin/nvcc"]["mode"] == "0o755" and files["bin/nvcc"]["component"] == "cuda_nvcc"
    # a host without symlinks (Windows without the right, Wine) copies the directory, and says so
    copied = {} if symlinks_work() else {"copy": "directory"}
    assert rec["links"] == [{"path": "lib64", "link": "lib", **copied}]
    assert rec["plan"]["release"] == "13.0.1" and rec["content_key"]


def test_verify_ok(prefix: Path) -> None:
    code, out, _ = cli("verify", "--prefix", str(prefix))
    assert code == 0 and out.startswith("ok: ")
    code, out, _ = cli("verify", "--prefix", str(prefix), "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["checked"] == len(read_record(prefix)["files"]) + 1  # type: ignore[index]
    assert report["missing"] == report["changed"] == report["extra"] == []


def _tamper(prefix: Path) -> None:
    (prefix / "include" / "cuda_runtime.h").write_bytes(b"// patched")           # changed content
    (prefix / "bin" / "nvcc.profile").unlink()                                   # missing
    (prefix / "include" / "mine.h").write_bytes(b"user file")                    # extra
    (prefix / "lib" / "libcudart.so.13").unlink()
    (prefix / "lib" / "libcudart.so.13").write_bytes(b"a copy, not a link")      # link -> file
    os.unlink(prefix / "lib" / "libcudart.so")
    os.symlink("libcudart.so.13.0.96", prefix / "lib" / "libcudart.so")          # other target
    os.unlink(prefix / "lib64")                                                  # platform link gone


@needs_symlinks
def test_verify_reports_missing_changed_and_extra(prefix: Path) -> None:
    _tamper(prefix)
    code, out, _ = cli("verify", "--prefix", str(prefix), "--json")
    report = json.loads(out)
    assert code == 1 and not report["ok"]
    assert report["missing"] == ["bin/nvcc.profile", "lib64"]
    assert report["changed"] == ["include/cuda_runtime.h", "lib/libcudart.so", "lib/libcudart.so.13"]
    assert report["extra"] == ["include/mine.h"]
    code, out, _ = cli("verify", "--prefix", str(prefix))
    assert code == 1
    assert "missing  bin/nvcc.profile" in out and "extra    include/mine.h" in out
    assert out.splitlines()[-1].startswith("DIFFERS:")


@pytest.mark.parametrize("fast", [False, True], ids=["hashed", "fast"])
def test_a_folder_replaced_by_a_file_lists_what_it_held_as_missing(prefix: Path, fast: bool) -> None:
    """bin/ turned into a file: every recorded file under it is missing, and the file is extra (the
    lstat of bin/nvcc fails with ENOTDIR, not ENOENT, which is no disk error of this machine)."""
    held = sorted(f["path"] for f in read_record(prefix)["files"] if f["path"].startswith("bin/"))  # type: ignore[index]
    shutil.rmtree(prefix / "bin")
    (prefix / "bin").write_bytes(b"not a folder")
    code, out, err = cli("verify", "--prefix", str(prefix), "--json", *(["--fast"] if fast else []))
    assert code == 1 and not err, err
    report = json.loads(out)
    assert report["missing"] == held and report["extra"] == ["bin"] and held


def test_files_added_since_the_install_are_listed_not_failed(prefix: Path) -> None:
    """A tool that writes into the tree (PyTorch's AOTInductor writes lib/x64/libcudart.a and
    cudart64_13.def beside cudart.lib when they are missing) does not damage it; uninstall keeps them."""
    (prefix / "lib" / "libcudart.a").write_bytes(b"!<arch>\n")
    (prefix / "lib" / "cudart64_13.def").write_text("EXPORTS\n")
    code, out, _ = cli("verify", "--prefix", str(prefix), "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"], out
    assert report["extra"] == ["lib/cudart64_13.def", "lib/libcudart.a"] and report["missing"] == []
    code, out, _ = cli("verify", "--prefix", str(prefix))
    assert code == 0 and "extra    lib/libcudart.a" in out
    last = out.splitlines()[-1]
    assert last.startswith("ok: ") and last.endswith("2 extra (added since the install, kept by uninstall)")
    assert cli("uninstall", "--prefix", str(prefix))[0] == 0
    assert sorted(p.name for p in (prefix / "lib").iterdir()) == ["cudart64_13.def", "libcudart.a"]


def test_fast_verify_compares_sizes_only(prefix: Path) -> None:
    (prefix / "include" / "crt" / "host_config.h").write_bytes(b"// HC")  # same size
    assert verify(prefix, fast=True).ok
    assert verify(prefix).changed == ["include/crt/host_config.h"]
    (prefix / "include" / "crt" / "host_config.h").write_bytes(b"// longer")
    assert verify(prefix, fast=True).changed == ["include/crt/host_config.h"]


def test_info_text_and_json(prefix: Path) -> None:
    code, out, _ = cli("info", "--prefix", str(prefix))
    assert code == 0
    assert f"prefix:    {prefix}" in out and "release:   CUDA 13.0.1 (2026-01-01)" in out
    assert "platform:  linux-x86_64" in out and "cuda_nvcc" in out
    code, out, _ = cli("info", "--prefix", str(prefix), "--json")
    info = json.loads(out)
    assert code == 0 and "files" not in info
    assert info["file_count"] == len(read_record(prefix)["files"])  # type: ignore[index]
    assert [c["name"] for c in info["plan"]["components"]] == [
        "cuda_nvcc", "cuda_cudart", "cuda_cccl", "cuda_crt", "libnvvm", "cuda_profiler_api", "cuda_nvtx"]


@pytest.mark.parametrize("command", ["verify", "info", "uninstall"])
def test_commands_on_a_prefix_without_an_install(tmp_path: Path, command: str) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "keep.txt").write_text("x")
    code, _, err = cli(command, "--prefix", str(tmp_path / "plain"))
    assert code == 1 and "holds no cudaredist install" in err
    assert (tmp_path / "plain" / "keep.txt").exists()


@pytest.mark.parametrize("field, value, words", [
    pytest.param("plan.products", 5, "plan.products is not a list", id="products-not-a-list"),
    pytest.param("plan.products", ["cudnn"], "plan.products[0] is not an object", id="product-not-an-object"),
    pytest.param("plan.products", [{"name": "cudnn"}], "plan.products[0].release is missing",
                 id="product-without-release"),
    pytest.param("plan.notes", "x", "plan.notes is not a list", id="notes-not-a-list"),
    pytest.param("plan.notes", [1], "plan.notes[0] is not a string", id="note-not-a-string"),
    pytest.param("provenance", 5, "provenance is not an object", id="provenance-not-an-object"),
    pytest.param("provenance.archives", 5, "provenance.archives is not an object",
                 id="provenance-archives-not-an-object"),
])
@pytest.mark.parametrize("command", ["info", "verify", "doctor", "install"])
def test_an_edited_field_is_a_damaged_record(prefix: Path, mirror: Path, command: str, field: str,
                                                  value: object, words: str) -> None:
    """Every command that reads the record names the field, as for any other damage, never "internal
    error"."""
    rp = record_path(prefix)
    rec = json.loads(rp.read_text())
    *parents, name = field.split(".")
    edited = rec
    for key in parents:
        edited = edited[key]
    edited[name] = value
    rp.write_text(json.dumps(rec))
    args = {"install": ["install", "13.0", "--base-url", str(mirror), "--platform", "linux-x86_64"],
            "verify": ["verify", "--fast"]}.get(command, [command])
    r = runner.invoke(app, [*args, "--prefix", str(prefix)])
    out = r.stdout + r.stderr
    assert r.exit_code == 1, out
    assert f"{rp} is damaged ({words})" in out and "--reinstall" in out
    assert "internal error" not in out and "Traceback" not in out


def test_uninstall_removes_exactly_what_was_installed(prefix: Path, tmp_path: Path) -> None:
    (prefix / "include" / "mine.h").write_bytes(b"user file")
    (prefix / "notes").mkdir()
    (prefix / "notes" / "todo.txt").write_text("user dir")
    code, out, _ = cli("uninstall", "--prefix", str(prefix))
    assert code == 0 and out.startswith("removed ")
    assert snapshot(prefix) == {"include": "dir", "include/mine.h": snapshot(prefix)["include/mine.h"],
                                "notes": "dir", "notes/todo.txt": snapshot(prefix)["notes/todo.txt"]}
    code, _, err = cli("verify", "--prefix", str(prefix))
    assert code == 1 and "holds no cudaredist install" in err


def test_uninstall_of_an_untouched_install_removes_the_prefix(prefix: Path) -> None:
    n = len(read_record(prefix)["files"]) + 1  # type: ignore[index]
    code, out, _ = cli("uninstall", "--prefix", str(prefix))
    assert code == 0 and out.startswith(f"removed {n} files")
    assert not prefix.exists()
    # no .cuda.cudaredist.lock either (it stayed beside the prefix on POSIX)
    assert sorted(p.name for p in prefix.parent.iterdir()) == []


@needs_symlinks
def test_uninstall_does_not_follow_a_directory_replaced_by_a_symlink(prefix: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "cuda_runtime.h").write_bytes(b"not cudaredist's")
    os.rename(prefix / "include", tmp_path / "moved-include")
    os.symlink(elsewhere, prefix / "include")
    uninstall(prefix)
    assert (elsewhere / "cuda_runtime.h").read_bytes() == b"not cudaredist's"


def test_uninstall_ignores_record_paths_that_leave_the_prefix(prefix: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    rp = record_path(prefix)
    rec = json.loads(rp.read_text())
    rec["files"] += [{"path": "../../victim.txt", "size": 7, "sha256": "", "mode": "0o644"},
                     {"path": str(victim), "size": 7, "sha256": "", "mode": "0o644"}]
    rp.write_text(json.dumps(rec))
    uninstall(prefix)
    assert victim.read_text() == "keep me"


def test_uninstall_waits_for_the_prefix_lock(prefix: Path) -> None:
    with filelock.FileLock(str(prefix.parent / ".cuda.cudaredist.lock")):
        code, _, err = cli("uninstall", "--prefix", str(prefix), "--lock-timeout", "0.2")
    assert code == 75 and "busy" in err
    assert verify(prefix).ok


@pytest.mark.skipif(os.name == "nt", reason="exec bits and symlinks are POSIX")
@pytest.mark.parametrize("fast", [False, True], ids=["full", "fast"])
def test_verify_checks_modes_and_links(prefix: Path, fast: bool) -> None:
    """Same bytes, wrong shape: each is a "changed" entry with its reason, with --fast too."""
    rec = read_record(prefix)
    assert rec is not None
    files = {f["path"]: f for f in rec["files"]}
    assert files["bin/nvcc"]["mode"] == "0o755"
    os.chmod(prefix / "bin" / "nvcc", 0o644)                                    # exec bit removed
    os.unlink(prefix / "lib" / "libcudart.so")
    os.symlink("libcudart.so.13.0.96", prefix / "lib" / "libcudart.so")         # retargeted
    so13 = prefix / "lib" / "libcudart.so.13"
    real = (prefix / "lib" / os.readlink(so13)).read_bytes()
    os.unlink(so13)
    so13.write_bytes(real)                                                      # link -> same bytes
    header = prefix / "include" / "cuda_runtime.h"
    os.chmod(header, 0o755)                                                     # exec bit added
    args = ["--fast"] if fast else []
    code, out, _ = cli("verify", "--prefix", str(prefix), "--json", *args)
    report = json.loads(out)
    assert code == 1 and not report["ok"]
    assert report["changed"] == ["bin/nvcc", "include/cuda_runtime.h", "lib/libcudart.so",
                                 "lib/libcudart.so.13"]
    assert report["reasons"] == {
        "bin/nvcc": "the exec bit was removed",
        "include/cuda_runtime.h": "an exec bit was added",
        "lib/libcudart.so": "the symlink points to libcudart.so.13.0.96, not libcudart.so.13",
        "lib/libcudart.so.13": f"a symlink to {files['lib/libcudart.so.13']['link']} was replaced by a file",
    }
    code, out, _ = cli("verify", "--prefix", str(prefix), *args)
    assert code == 1 and "changed  bin/nvcc (the exec bit was removed)" in out
    # a file turned into a link to identical bytes is a change as well
    os.chmod(prefix / "bin" / "nvcc", 0o755)
    (prefix / "bin" / "nvcc.copy").write_bytes((prefix / "bin" / "nvcc").read_bytes())
    os.unlink(prefix / "bin" / "nvcc")
    os.symlink("nvcc.copy", prefix / "bin" / "nvcc")
    report = verify(prefix, fast=fast)
    assert report.reasons["bin/nvcc"] == "a file was replaced by a symlink to nvcc.copy"


@needs_symlinks
def test_uninstall_keeps_a_real_directory_where_the_record_says_a_link_was(prefix: Path) -> None:
    # lib64 -> lib (a platform link) and lib/libcudart.so -> libcudart.so.13 (an archive's link),
    # both replaced by the user with real directories holding their own files
    os.unlink(prefix / "lib64")
    (prefix / "lib64").mkdir()
    (prefix / "lib64" / "libmine.so").write_bytes(b"user library")
    os.unlink(prefix / "lib" / "libcudart.so")
    (prefix / "lib" / "libcudart.so").mkdir()
    (prefix / "lib" / "libcudart.so" / "keep").write_bytes(b"user file")
    code, out, err = cli("uninstall", "--prefix", str(prefix))
    assert code == 0, err
    assert (prefix / "lib64" / "libmine.so").read_bytes() == b"user library"
    assert (prefix / "lib" / "libcudart.so" / "keep").read_bytes() == b"user file"
    assert not (prefix / "lib" / "libcudart.so.13").exists()


def test_uninstall_removes_a_link_the_install_had_to_copy(mirror: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.symlink

    def no_directory_links(src: str, dst: str, target_is_directory: bool = False, **k: object) -> None:
        if target_is_directory:  # as on Windows without developer mode
            raise OSError(1, "Operation not permitted")
        real(src, dst)
    monkeypatch.setattr(os, "symlink", no_directory_links)
    p = tmp_path / "copy" / "cuda"
    code, _, err = cli("install", "13.0", "--prefix", str(p), "--platform", "linux-x86_64",
                       "--base-url", str(mirror), "-q")
    assert code == 0, err
    monkeypatch.undo()
    assert read_record(p)["links"] == [{"path": "lib64", "link": "lib", "copy": "directory"}]  # type: ignore[index]
    assert (p / "lib64").is_dir() and not (p / "lib64").is_symlink()
    code, _, err = cli("uninstall", "--prefix", str(p))
    assert code == 0, err
    assert not p.exists()


@pytest.mark.parametrize("command", ["verify", "info", "env", "doctor"])
def test_commands_on_a_swap_cut_short_name_the_previous_tree(prefix: Path, command: str) -> None:
    """A swap killed between its two renames leaves the prefix missing and the previous tree beside
    it: each command names that tree and the command that puts it back (which then does)."""
    old = prefix.parent / f".{prefix.name}.cudaredist-old-1234abcd"
    os.rename(prefix, old)
    code, out, err = cli(command, "--prefix", str(prefix))
    said = out + err
    assert code == 1, said
    assert f"{prefix} does not exist: an install was cut short while it swapped trees" in said
    assert str(old) in said and "holds no cudaredist install" not in said
    redo = said.split("`cudaredist install ", 1)[1].split("`", 1)[0]
    assert redo.startswith(f"13.0.1 --prefix {prefix} --platform linux-x86_64")
    from tests.hosts import split_line

    code, _, err = cli("install", *split_line(redo))
    assert code == 0 and "restored" in err and "already installed" in err, err
    assert verify(prefix).ok and not old.exists()
