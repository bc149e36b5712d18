"""The steps of the cudaredist GitHub actions (action.yml and cache/action.yml).

``python steps.py COMMAND``, run by the composite actions' bash steps with the Python that
find-python.sh found. Standard library only (it runs before cudaredist is installed), Python 3.10+.
Inputs come in ``CR_*`` variables; results go to $GITHUB_OUTPUT, $GITHUB_ENV and $GITHUB_PATH;
every failure is an ``::error::`` annotation (one paragraph: what, where, what to do) and a
non-zero exit.

Commands: ``check`` (the inputs, before anything is installed), ``tool-key`` and ``tool`` (the
action's own cudaredist: a venv kept in the runner's tool cache, so a warm job installs nothing),
``cache-key`` (cache/action.yml: the Actions-cache key and paths), ``install``, ``doctor``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]  # the action's checkout: pyproject.toml, cudaredist/
TRAIN_RE = re.compile(r"\d+(\.\d+){0,2}")
PLATFORM_RE = re.compile(r"[a-z]+-[a-z0-9_]+")
WINDOWS = os.name == "nt"
PINS = ROOT / "action" / "requirements.txt"  # the dependencies, pinned with hashes (action/update-pins.sh)
BUILD_TIMEOUT = 600  # seconds: a tool build older than this was abandoned


class StepError(Exception):
    """A failure of a step: becomes one ::error:: annotation and exit code ``code``."""

    def __init__(self, message: str, title: str = "cudaredist", code: int = 1) -> None:
        super().__init__(message)
        self.title, self.code = title, code


# -- workflow commands -----------------------------------------------------------------------------
def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def annotate(kind: str, message: str, title: str = "cudaredist") -> None:
    prop = _data(title).replace(":", "%3A").replace(",", "%2C")
    print(f"::{kind} title={prop}::{_data(message)}", flush=True)


def _append(var: str, name: str, value: str) -> None:
    """NAME<<delimiter blocks: safe for any value (quotes, backslashes, line breaks)."""
    delim = f"cudaredist_{uuid.uuid4().hex}"
    with open(os.environ[var], "a", encoding="utf-8") as f:
        f.write(f"{name}<<{delim}\n{value}\n{delim}\n")


def output(name: str, value: str) -> None:
    _append("GITHUB_OUTPUT", name, value)


def export(name: str, value: str) -> None:
    _append("GITHUB_ENV", name, value)
    os.environ[name] = value


def add_path(directory: Path) -> None:
    with open(os.environ["GITHUB_PATH"], "a", encoding="utf-8") as f:
        f.write(f"{directory}\n")


def inp(name: str) -> str:
    return os.environ.get(f"CR_{name.upper().replace('-', '_')}", "").strip()


# -- check -----------------------------------------------------------------------------------------
def _profiles() -> list[str]:
    text = (ROOT / "manifests" / "profiles.toml").read_text(encoding="utf-8")
    return re.findall(r"^\[profiles\.([A-Za-z0-9_-]+)\]", text, re.M)


def _products() -> list[str]:
    text = (ROOT / "manifests" / "profiles.toml").read_text(encoding="utf-8")
    return re.findall(r"^\[products\.([A-Za-z0-9_-]+)\]", text, re.M)


def _with() -> list[str]:
    """The `with` input: products, space- or comma-separated (``cudnn``, ``cudnn=9.20 cutensor``)."""
    return inp("with").replace(",", " ").split()


def problems() -> list[str]:
    """Everything wrong with the inputs, each a sentence saying what to give instead."""
    found: list[str] = []
    train, trains = inp("train"), inp("trains").split()
    if train and trains:
        found.append(f"give either 'train' or 'trains', not both "
                     f"(train: '{train}', trains: '{' '.join(trains)}')")
    elif not train and not trains:
        found.append("give 'train' (e.g. '13.4': the newest 13.4.x) or 'trains' (e.g. '13.0 13.4')")
    if len(train.split()) > 1:
        found.append(f"'train' takes one train, got '{train}'; for several use 'trains: \"{train}\"'")
    for t in train.split() + trains:
        if not TRAIN_RE.fullmatch(t):
            found.append(f"'{t}' is not a CUDA train: give a major (13), a train (13.4) "
                         "or a release (13.4.1)")
    dupes = sorted({t for t in trains if trains.count(t) > 1})
    if dupes:
        found.append(f"'trains' names {', '.join(dupes)} more than once")
    if trains and inp("prefix"):
        found.append("'prefix' goes with 'train'; with 'trains' each toolkit goes into "
                     "CUDAREDIST_INSTALL_DIR (set it in the job's env to choose the directory)")
    platform = inp("platform")
    if platform and not PLATFORM_RE.fullmatch(platform):
        found.append(f"'platform: {platform}' is not a platform: give linux-x86_64, linux-sbsa, "
                     "windows-x86_64 or windows-arm64, or leave it out for the runner's own")
    profiles = _profiles()
    if inp("profile") not in profiles:
        found.append(f"'profile: {inp('profile')}' is not a profile: give one of {', '.join(profiles)}")
    products = _products()
    for item in _with():
        name, _sep, spec = item.partition("=")
        if name not in products:
            found.append(f"'with: {item}': {name} is not a product: give {', '.join(products)} "
                         "(e.g. 'with: cudnn' or 'with: cudnn=9.20')")
        elif _sep and not re.fullmatch(r"[0-9]+(\.[0-9]+){0,3}", spec):
            found.append(f"'with: {item}': '{spec}' is not a release: give {name}=MAJOR.MINOR (a train) "
                         f"or {name}=MAJOR.MINOR.PATCH, or {name} alone (the newest for the CUDA major)")
    if inp("source") not in ("", "nvidia", "pypi"):
        found.append(f"'source: {inp('source')}' is not a source: give nvidia or pypi, or leave it out")
    host_compiler = inp("host-compiler")
    if "\n" in host_compiler or (host_compiler.startswith("-") and host_compiler not in ("auto", "off")):
        found.append(f"'host-compiler: {host_compiler}' is not a compiler: give auto, off, an MSVC toolset "
                     "version (14.44) or a compiler's path or command (g++-15)")
    if inp("compat") not in ("", "auto", "on", "off"):
        found.append(f"'compat: {inp('compat')}' is not a mode: give auto, on or off")
    if inp("doctor") not in ("report", "fail", "off"):
        found.append(f"'doctor: {inp('doctor')}' is not a mode: give report, fail or off")
    for flag in ("cache", "cache-unpacked"):
        if f"CR_{flag.upper().replace('-', '_')}" in os.environ and inp(flag) not in ("true", "false"):
            found.append(f"'{flag}: {inp(flag)}' is not a boolean: give 'true' or 'false'")
    return found


def check() -> None:
    found = problems()
    for p in found:
        annotate("error", f"{p} (nothing was installed)", "cudaredist input")
    if found:
        raise StepError("", code=2)  # said above, one annotation per input
    output("trains", " ".join(inp("trains").split() or [inp("train")]))


# -- the action's own cudaredist -------------------------------------------------------------------
def _source_hash() -> str:
    h = hashlib.sha256()
    files = [ROOT / "pyproject.toml", PINS, *sorted((ROOT / "cudaredist").rglob("*.py")),
             *sorted(p for p in (ROOT / "manifests").rglob("*") if p.is_file())]
    for f in files:
        h.update(f.relative_to(ROOT).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def tool_location() -> tuple[str, Path]:
    """(key, directory): one venv per action source, Python and runner OS/arch, in the tool cache."""
    interp = hashlib.sha256(f"{os.path.realpath(sys.executable)}\0{sys.version}".encode()).hexdigest()
    key = (f"cudaredist-tool-{os.environ.get('RUNNER_OS', sys.platform)}-{os.environ.get('RUNNER_ARCH', '')}"
           f"-py{sys.version_info[0]}.{sys.version_info[1]}-{interp[:8]}-{_source_hash()[:16]}")
    base = os.environ.get("RUNNER_TOOL_CACHE") or os.environ.get("RUNNER_TEMP") or str(Path.home())
    return key, Path(base) / "cudaredist" / key


def tool_key() -> None:
    key, directory = tool_location()
    output("key", key)
    output("dir", str(directory))


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if WINDOWS else "bin/python")


def _usable(directory: Path) -> bool:
    py = _venv_python(directory / "venv")
    if not (directory / "ready").is_file() or not py.exists():
        return False
    r = subprocess.run([str(py), "-c", "import cudaredist.cli"], capture_output=True)
    return r.returncode == 0


def _write_launchers(bindir: Path, python: Path) -> Path:
    """cudaredist for later steps, without the venv's python or pip on PATH."""
    bindir.mkdir(parents=True)
    sh = bindir / "cudaredist"
    quoted = "'" + python.as_posix().replace("'", "'\\''") + "'"
    sh.write_text(f'#!/bin/sh\nexec {quoted} -m cudaredist "$@"\n', encoding="utf-8", newline="\n")
    sh.chmod(0o755)
    if WINDOWS:  # cmd and pwsh find cudaredist.cmd through PATHEXT; bash finds the script above
        cmd = bindir / "cudaredist.cmd"
        cmd.write_text(f'@"{python}" -m cudaredist %*\r\n', encoding="utf-8", newline="")
        return cmd
    return sh


def _pip_failed(what: str, r: subprocess.CompletedProcess[str], where: Path) -> StepError:
    tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-15:])
    return StepError(f"{what} failed (exit {r.returncode}) in {where} with {sys.executable}:\n{tail}\n"
                     "The first run on a runner installs cudaredist's dependencies with pip: check that "
                     "the runner reaches a Python package index (PIP_INDEX_URL for a mirror). Later runs "
                     "reuse it from the tool cache.", "cudaredist could not install itself")


def _build(key: str, directory: Path) -> None:
    tmp = directory.parent / f".tmp-{key}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        r = subprocess.run([sys.executable, "-m", "venv", str(tmp / "venv")], capture_output=True, text=True)
        if r.returncode != 0:
            tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-8:])
            raise StepError(f"{sys.executable} cannot make a venv (python -m venv exited {r.returncode}):\n"
                            f"{tail}\nOn Debian and Ubuntu install python3-venv (apt-get install "
                            "python3-venv), or put 'uses: actions/setup-python@v5' before this action, or "
                            "set CUDAREDIST_PYTHON to a Python 3.10+ that has venv.",
                            "cudaredist could not install itself")
        # every dependency exactly as pinned, each file checked against its sha256 (action/requirements.txt):
        # a new release of a dependency can neither break nor take over the runners
        pip = [str(_venv_python(tmp / "venv")), "-m", "pip", "install", "--quiet", "--require-hashes",
               "--disable-pip-version-check", "--no-warn-script-location", "-r", str(PINS)]
        r = subprocess.run(pip, capture_output=True, text=True)
        if r.returncode != 0:
            raise _pip_failed("pip install of the action's pinned dependencies", r, tmp)
        # cudaredist itself is the action's own source, copied in (no build step, no build backend
        # fetched unpinned): the package and the profile data beside it, on the venv's path
        for part in ("cudaredist", "manifests"):
            shutil.copytree(ROOT / part, tmp / "src" / part, ignore=shutil.ignore_patterns("__pycache__"))
        purelib = subprocess.run([str(_venv_python(tmp / "venv")), "-c",
                                  "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        Path(purelib, "cudaredist-action.pth").write_text(f"{directory / 'src'}\n", encoding="utf-8")
        # the venv works under its final name too: nothing of it is started through pip's scripts
        _write_launchers(tmp / "bin", _venv_python(directory / "venv"))
        (tmp / "ready").write_text(key + "\n", encoding="utf-8")
        for attempt in range(5):
            try:
                os.rename(tmp, directory)
                break
            except OSError as exc:
                if _usable(directory):  # a parallel job got there first
                    break
                # Windows: a virus scanner may still hold a file it just saw written
                if not isinstance(exc, PermissionError) or attempt == 4:
                    raise
                time.sleep(1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _build_once(key: str, directory: Path) -> None:
    """Build the venv unless a parallel job on this runner is building it: then wait for that one."""
    lock = directory.parent / f".{key}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    waited = 0
    while True:
        try:
            os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            break
        except FileExistsError:
            if _usable(directory):
                return
            try:
                stale = time.time() - lock.stat().st_mtime > BUILD_TIMEOUT  # its builder died
            except FileNotFoundError:
                continue
            if stale or waited > BUILD_TIMEOUT:
                lock.unlink(missing_ok=True)
                continue
            if waited == 0:
                print(f"another job on this runner is installing cudaredist into {directory}; waiting",
                      flush=True)
            time.sleep(1)
            waited += 1
    try:
        if _usable(directory):
            return
        if directory.exists():
            shutil.rmtree(directory)  # half there or broken (its Python was replaced): build it again
        print(f"installing cudaredist from {ROOT} into {directory} (once per runner and version)", flush=True)
        _build(key, directory)
    finally:
        lock.unlink(missing_ok=True)


def tool() -> None:
    key, directory = tool_location()
    warm = _usable(directory)
    if warm:
        print(f"cudaredist from the tool cache: {directory}", flush=True)
    else:
        _build_once(key, directory)
    launcher = directory / "bin" / ("cudaredist.cmd" if WINDOWS else "cudaredist")
    add_path(directory / "bin")
    output("python", str(_venv_python(directory / "venv")))
    output("cudaredist", str(launcher))
    output("dir", str(directory))
    output("warm", "true" if warm else "false")


# -- running cudaredist ----------------------------------------------------------------------------
def cudaredist(*args: str, title: str) -> str:
    """Run the tool; its stdout is returned, its stderr goes to the log as it comes, and its
    error paragraph becomes the ::error:: annotation when it fails."""
    python = os.environ["CR_PYTHON"]
    proc = subprocess.Popen([python, "-m", "cudaredist", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, encoding="utf-8", errors="replace")
    err: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err.append(line)
            sys.stderr.write(line)
            sys.stderr.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    assert proc.stdout is not None
    out = proc.stdout.read()
    code = proc.wait()
    reader.join()
    if code != 0:
        text = "".join(err)
        starts = [m.end() for m in re.finditer(r"(?m)^error:", text)]
        message = text[starts[-1]:].strip() if starts else "\n".join(text.strip().splitlines()[-20:])
        raise StepError(message or f"cudaredist {args[0]} exited {code} without a message", title,
                        code if code != 0 else 1)
    return out


def _unpacked() -> list[str]:
    """``--no-cache-unpacked`` where the unpacked entries would die with the job: a GitHub-hosted
    runner, unless the Actions cache keeps them (cache/action.yml's ``cache-unpacked: true``). Each
    file is then written once, straight into the prefix. A CUDAREDIST_CACHE_UNPACKED of the job's
    decides instead; a self-hosted runner keeps its cache between jobs, and the entries with it."""
    if "CUDAREDIST_CACHE_UNPACKED" in os.environ or os.environ.get("RUNNER_ENVIRONMENT") != "github-hosted":
        return []
    if inp("cache") == "true" and inp("cache-unpacked") == "true":
        return []
    return ["--no-cache-unpacked"]


def _common() -> list[str]:
    args = ["--profile", inp("profile")]
    if inp("platform"):
        args += ["--platform", inp("platform")]
    if inp("source"):
        args += ["--source", inp("source")]
    for item in _with():
        args += ["--with", item]
    return args


def cache_key() -> None:
    hashes = [cudaredist("lock", t, *_common(), "--hash", title="cudaredist lock failed").strip()
              for t in inp("trains").split()]
    digest = hashlib.sha256("\n".join(hashes).encode()).hexdigest()
    flavour = "archives+unpacked" if inp("cache-unpacked") == "true" else "archives"
    runner = f"{os.environ.get('RUNNER_OS', sys.platform)}-{os.environ.get('RUNNER_ARCH', '')}"
    output("key", f"cudaredist-{runner}-{inp('source') or 'default'}-{flavour}-{digest}")
    cache_dir = Path(cudaredist("cache", "dir", title="cudaredist cache failed").strip())
    export("CUDAREDIST_CACHE_DIR", str(cache_dir))  # the install that follows fills exactly this one
    # actions/cache puts the literal path into the entry's version: under $HOME, say it with `~`,
    # so the entry matches on every runner whatever its home, temp or work directory
    try:
        literal = "~/" + cache_dir.relative_to(Path.home()).as_posix()
    except ValueError:
        literal = cache_dir.as_posix()
    buckets = ["archives", "unpacked"] if inp("cache-unpacked") == "true" else ["archives"]
    output("path", "\n".join(f"{literal}/{b}" for b in buckets))
    output("cache-dir", str(cache_dir))


# -- install, doctor -------------------------------------------------------------------------------
def _set_env_for(prefix: str, *, first: bool) -> dict[str, Any]:
    """CUDA_PATH_V<major>_<minor> for every toolkit; the whole environment for the first, with the
    host compiler chosen for it (the `host-compiler` input) and its compat/ first on LD_LIBRARY_PATH
    where cudaredist's forward-compatibility decision says so (the `compat` input)."""
    chooser = ["--host-compiler", inp("host-compiler") or "auto", "--compat", inp("compat") or "auto"]
    if first:
        cudaredist("env", "--prefix", prefix, "--github", *chooser, title="cudaredist env failed")
    found: dict[str, Any] = json.loads(cudaredist("env", "--prefix", prefix, "--json", *chooser,
                                                     title="cudaredist env failed"))
    if not first:
        for name, value in found["set"].items():
            if name.startswith("CUDA_PATH_V"):
                export(name, str(value))
    return found


def _toolkit_of(train: str, rows: list[dict[str, Any]]) -> str:
    """The prefix of TRAIN among `install --json`'s toolkits (listed no-ops first, not in the order
    asked): the newest release of the train, as TRAIN resolves and as `cudaredist find` answers."""
    def release(row: dict[str, Any]) -> tuple[int, ...]:
        return tuple(int(p) for p in str(row["release"]).split(".") if p.isdigit())

    fits = [r for r in rows if str(r["release"]) == train or str(r["release"]).startswith(train + ".")]
    if not fits:
        raise StepError(f"cudaredist installed no toolkit for train {train} (it installed "
                        f"{', '.join(str(r['release']) for r in rows) or 'none'})",
                        "cudaredist install failed")
    return str(max(fits, key=release)["prefix"])


def install() -> None:
    trains = inp("trains").split()
    title = "cudaredist install failed"
    if inp("train"):
        temp = os.environ.get("RUNNER_TEMP") or os.getcwd()
        platform = f"-{inp('platform')}" if inp("platform") else ""
        prefix = inp("prefix") or os.path.join(temp, f"cuda-{trains[0]}{platform}")
        done = json.loads(cudaredist("install", trains[0], "--prefix", prefix, *_common(), *_unpacked(),
                                     "--json", title=title))
        prefixes = [str(done["prefix"])]
        print(done.get("message", ""), flush=True)
    else:
        install_dir = os.environ.get("CUDAREDIST_INSTALL_DIR") or os.path.join(
            os.environ.get("RUNNER_TEMP") or os.getcwd(), "cudaredist-toolkits")
        export("CUDAREDIST_INSTALL_DIR", install_dir)
        done = json.loads(cudaredist("install", *trains, *_common(), *_unpacked(), "--json", title=title))
        rows = done["toolkits"]
        for row in rows:
            print(row.get("message", ""), flush=True)
        prefixes = [_toolkit_of(t, rows) for t in trains]
    envs = [_set_env_for(p, first=i == 0) for i, p in enumerate(prefixes)]
    output("cuda-path", str(envs[0]["prefix"]))
    output("release", str(envs[0]["release"]))
    # the tree's CycloneDX SBOM, written by the install beside its record (actions/attest-sbom signs it)
    output("sbom", os.path.join(str(envs[0]["prefix"]), ".cudaredist", "sbom.cdx.json"))
    output("cuda-paths", json.dumps({t: str(e["prefix"]) for t, e in zip(trains, envs, strict=True)}))
    # `cmake -G "Visual Studio 17 2022" <this>`: -T version=<the chosen MSVC toolset>,cuda=<tree> (the
    # tree's NVIDIA MSBuild files), quoted as cudaredist.envexport.cmake_line does (stdlib only here)
    output("cmake-args", " ".join(f'"{a}"' if " " in a else a for a in envs[0].get("cmake_args", [])))
    output("host-compiler", str(envs[0]["set"].get("NVCC_CCBIN", "")))
    output("compat", "true" if envs[0].get("compat", {}).get("first") else "false")
    output("cudaredist", os.environ.get("CR_CUDAREDIST", ""))


def doctor() -> None:
    r = subprocess.run([os.environ["CR_PYTHON"], "-m", "cudaredist", "doctor", "--prefix", inp("prefix"),
                        "--compat", inp("compat") or "auto"])
    if r.returncode == 0:
        return
    if inp("doctor") == "fail":
        raise StepError(f"a check of the CUDA toolkit in {inp('prefix')} failed (the report above says "
                        "which and how to fix it); 'doctor: report' only warns, 'doctor: off' skips it",
                        "cudaredist doctor", r.returncode)
    annotate("warning", "a check failed (see its report above); the job goes on (doctor: fail stops it)",
             "cudaredist doctor")


COMMANDS = {"check": check, "tool-key": tool_key, "tool": tool, "cache-key": cache_key,
            "install": install, "doctor": doctor}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in COMMANDS:
        print(f"usage: steps.py {{{','.join(COMMANDS)}}}", file=sys.stderr)
        return 2
    try:
        COMMANDS[argv[0]]()
    except StepError as exc:
        if str(exc):
            annotate("error", str(exc), exc.title)
        return exc.code
    except OSError as exc:
        annotate("error", f"{exc} (while running the action's '{argv[0]}' step)", "cudaredist action")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
