"""Before and after: two checkouts of cudaredist timed side by side, with where each run's time went.

Issue 37 asks for "the profile before and after". This runs the issue's paths (cold, warm
hard-linked, warm default and no-op, redist and pypi) for an old checkout (a git revision, made a
worktree) and this one, alternating run by run on the same mirror and index from one unthrottled
loopback server, and reports for each the medians of wall, CPU, and the main thread's phases:

  start-up   process start to the command's call (the interpreter, imports, the command line),
             and the process's end once its exit handlers ran
  resolve    the source opened and the plan resolved (manifest or index pages, wheel metadata)
  build      downloads, extractions and placement (``Build.run``; the main thread waits there)
  host fix   the host fixes (``hostfixes.apply``)
  record     the prefix's record built and written
  sbom       the tree's SBOM written beside it (``sbom.write``: rendered by the library on a miss,
             else the cached rendering with a new timestamp and serial)
  rest       everything else: the install machinery's imports, the locks, the staging tree and its
             swap into place, the output

A phase is timed by wrapping the function that owns it in the child process; a checkout without
that function shows ``-``. Needs the mirror and index that ``bench.py`` builds into its work dir.

    python benchmarks/before_after.py --old 2076f4e --reps 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from bench import _SCRUB, Server  # noqa: E402
from mirrors import components  # noqa: E402

ONLY = ["--only", *(a for c in components(with_nvrtc=False) for a in ("-c", c))]  # bench.py's five
PHASES = {  # phase: [(module, class or "", function)], each timed from its module's load on
    "start-up": [("cudaredist.api", "", "install")],
    "resolve": [("cudaredist.sources", "", "open_source"), ("cudaredist.sources.cross", "", "resolve_tree")],
    "build": [("cudaredist.install.build", "Build", "run")],
    "host fix": [("cudaredist.hostfixes", "", "apply")],  # every checkout since the fixes became data
    "record": [("cudaredist.record", "", "build_record"), ("cudaredist.record", "", "write_record")],
    "sbom": [("cudaredist.sbom", "", "write")],  # the tree's SBOM (issue 47)
}
# The child: times the phases' owners, then runs the command line as the console script does.
DRIVER = r"""
import atexit, functools, gc, importlib.util, json, os, sys, time
T0 = time.perf_counter()
gc.disable()  # as entry.main() does before its imports (and it enables the collector again)
spent, wanted, busy = {}, {}, set()
for phase, owners in json.loads(os.environ["BA_PHASES"]).items():
    for mod, cls, name in owners:
        wanted.setdefault(mod, []).append((phase, cls, name))
def timed(phase, fn):
    @functools.wraps(fn)
    def run(*a, **k):
        if phase == "start-up":  # the command's call: the end of start-up
            spent.setdefault(phase, time.perf_counter() - T0)
            return fn(*a, **k)
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[phase] = spent.get(phase, 0.0) + time.perf_counter() - t
    return run
def patch(module):
    for phase, cls, name in wanted.get(module.__name__, ()):
        owner = getattr(module, cls, None) if cls else module
        if owner is not None and callable(getattr(owner, name, None)):
            setattr(owner, name, timed(phase, getattr(owner, name)))
class Hook:  # each owner wrapped as its module loads: nothing imported that the run would not import
    def find_spec(self, fullname, path, target=None):
        if fullname not in wanted or fullname in busy:
            return None
        busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module
        def exec_and_patch(module):
            exec_module(module)
            patch(module)
        spec.loader.exec_module = exec_and_patch
        return spec
sys.meta_path.insert(0, Hook())
sys.argv = ["cudaredist", *sys.argv[1:]]
@atexit.register  # entry.leave ends the process with os._exit once the exit handlers have run
def done():
    spent["main"] = time.perf_counter() - T0
    with open(os.environ["BA_OUT"], "w") as fh:
        json.dump(spent, fh)
from cudaredist.entry import main
main()
"""


def cases(url: str, release: str = "13.0.2") -> dict[str, tuple[list[str], str, bool, bool]]:
    """name: (arguments, cache key, new prefix?, empty cache?)"""
    def redist(plat: str) -> list[str]:
        return ["install", release, "--platform", plat, *ONLY, "--base-url", url + "redist/", "--quiet"]

    def pypi(plat: str) -> list[str]:
        return ["install", release, "--platform", plat, *ONLY, "--source", "pypi",
                "--index-url", url + "pypi/simple/", "--quiet"]

    hard = ["--link-mode", "hardlink"]
    return {
        "redist cold, linux": (redist("linux-x86_64"), "rl", True, True),
        "redist cold, windows": (redist("windows-x86_64"), "rw", True, True),
        "pypi cold, linux": (pypi("linux-x86_64"), "pl", True, True),
        "redist warm hard-linked": (redist("linux-x86_64") + hard, "rl", True, False),
        "redist warm default": (redist("linux-x86_64"), "rl", True, False),
        "pypi warm hard-linked": (pypi("linux-x86_64") + hard, "pl", True, False),
        "pypi warm default": (pypi("linux-x86_64"), "pl", True, False),
        "redist no-op": (redist("linux-x86_64") + hard, "rl", False, False),
        "pypi no-op": (pypi("linux-x86_64") + hard, "pl", False, False),
    }


def one(python: str, checkout: Path, args: list[str], cache: Path, prefix: Path, *, fresh: bool,
        cold: bool, work: Path) -> dict[str, float]:
    out = work / "phases.json"
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB and k != "VIRTUAL_ENV"}  # as bench.py's
    # run from the work dir: `python -c` puts the current directory before PYTHONPATH
    env.update(PYTHONPATH=str(checkout), BA_PHASES=json.dumps(PHASES), BA_OUT=str(out))
    command = [python, "-c", DRIVER, *args, "--cache-dir", str(cache), "--prefix", str(prefix)]
    if cold:
        shutil.rmtree(cache, ignore_errors=True)
    if fresh:
        shutil.rmtree(prefix, ignore_errors=True)
    if not cold and not (cache.exists() and (fresh or prefix.exists())):  # what a warm run or no-op needs
        subprocess.run(command, env=env, cwd=work, stdout=subprocess.DEVNULL, check=True, timeout=600)
        if fresh:
            shutil.rmtree(prefix)
    os.sync()  # the write-back of the previous run's tree must not land in this one
    if cold and os.access("/proc/sys/vm/drop_caches", os.W_OK):
        Path("/proc/sys/vm/drop_caches").write_text("1")
    t0 = time.perf_counter()
    # os.wait4 blocks until the child ends (subprocess's wait with a timeout polls, up to 50 ms late)
    proc = subprocess.Popen(command, env=env, cwd=work, stdout=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}) for {checkout}")
    got: dict[str, float] = json.loads(out.read_text())
    main = got.pop("main")
    got["start-up"] = got.get("start-up", main) + wall - main  # the interpreter's start, before T0
    got["rest"] = wall - sum(got.values())
    got["wall"], got["cpu"] = wall, usage.ru_utime + usage.ru_stime
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", default="2076f4e", help="the revision before (default: where issue 37 began)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--work-dir", type=Path,
                    default=Path(os.environ.get("TMPDIR", "/tmp")) / "cudaredist-bench",
                    help="bench.py's work dir: its mirror (mirrors/) and index (pypi-index-13.0.2/)")
    ap.add_argument("--cases", default="", help="comma list of words: only the cases whose name has one")
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--release", default="13.0.2", help="the release the redist cases install (its mirror's)")
    opts = ap.parse_args(argv)
    work = opts.work_dir
    mirror = next((d for d in sorted((work / "mirrors").glob("*windows-x86_64*")) if d.is_dir()), None)
    index = work / "pypi-index-13.0.2"
    python = work / "venv-cudaredist" / "bin" / "python"
    if mirror is None or not index.is_dir() or not python.exists():
        raise SystemExit(f"no mirror with windows-x86_64, index or venv-cudaredist under {work}: run "
                         f"`python benchmarks/bench.py --work-dir {work}` once first")
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        tmpdir = Path(tmp)
        old = tmpdir / "old"
        made = subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(old),
                               opts.old], capture_output=True, text=True, check=False)
        if made.returncode:
            raise SystemExit(f"cannot check out --old {opts.old}: {made.stderr.strip()}")
        root = tmpdir / "serve"
        root.mkdir()
        (root / "redist").symlink_to(mirror, target_is_directory=True)
        (root / "pypi").symlink_to(index, target_is_directory=True)
        server = Server("loopback", root, conn_rate=0, agg_rate=0, ttfb=0, max_seconds=7200)
        results: dict[str, dict[str, list[dict[str, float]]]] = {}
        try:
            todo = {k: v for k, v in cases(server.url, opts.release).items()
                    if not opts.cases or any(w in k for w in opts.cases.split(","))}
            for rep in range(opts.reps):
                for name, (args, key, fresh, cold) in todo.items():
                    pair = [("before", old), ("after", REPO)]
                    for label, checkout in pair if rep % 2 == 0 else pair[::-1]:
                        tag = f"{label}-{name.replace(' ', '').replace(',', '')}"
                        got = one(str(python), checkout, args, tmpdir / f"cache-{label}-{key}", tmpdir / tag,
                                  fresh=fresh, cold=cold, work=tmpdir)
                        results.setdefault(name, {}).setdefault(label, []).append(got)
                print(f"repetition {rep + 1} of {opts.reps} done", file=sys.stderr)
        finally:
            server.stop()
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)], check=False)
    cols = ["wall", "cpu", "start-up", "resolve", "build", "host fix", "record", "sbom", "rest"]
    print(f"before: {opts.old}; after: this checkout; medians of {opts.reps} runs each, alternating, "
          "in seconds")
    print(f"{'case':26}{'':8}" + "".join(f"{c:>10}" for c in cols))
    for name, by in results.items():
        for label in ("before", "after"):
            runs = by[label]
            cells = [statistics.median(r[c] for r in runs) if all(c in r for r in runs) else None
                     for c in cols]
            print(f"{name if label == 'before' else '':26}{label:8}"
                  + "".join(f"{'-':>10}" if v is None else f"{v:10.3f}" for v in cells))
    if opts.json_out:
        opts.json_out.write_text(json.dumps({"old": opts.old, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
