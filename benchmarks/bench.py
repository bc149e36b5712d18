"""Install benchmark: cudaredist against a plain sequential installer, over a simulated CDN link.

One run serves a CUDA 13.0.2 mirror (under /redist/) and a package index of the same NVIDIA
wheels (under /pypi/, ``pypiindex.py``) from two loopback servers (``cdnserver.py``): "cdn"
(per-connection cap, aggregate cap, time to first byte) and "loopback" (unthrottled). For each
repetition, platform and link it runs, one after another and each as its own process:

  baseline       benchmarks/baseline.py: download -> sha256 -> extract -> merge, archive by archive
  cold           cudaredist install, empty cache, new prefix
  cold-direct    the same with --no-cache-unpacked (a runner's whose cache dies with the job)
  warm-archives  the same, archive cache full but <cache>/unpacked deleted, new prefix
  pypi-cold      cudaredist install --source pypi --index-url <the loopback index>, empty cache

and once per repetition and platform (they read no server; listed under the link "local"):

  warm-clone, warm-hardlink, warm-copy   from the unpacked cache, --link-mode MODE, new prefix each
  cp -a          a plain copy of the cold tree (copy mode's reference; the faster of two)
  no-op          warm-clone's command again (interpreter start included)

and takes wall time, CPU time and peak RSS of that child (``os.wait4``). In the same run it
times the decode of every archive (the decode floor: max(longest single archive on one core,
total over the cores)), pure extraction, and the cost of creating a file in the work dir. It
prints medians, ratios and PASS/MISS per target (benchmarks/targets.py), and writes everything to
``--json-out``.

The machine may be shared: every timing also records how many cores other processes kept
busy meanwhile ("bg"); a disturbed timing is repeated and the quietest one kept.
See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import lzma
import os
import platform as pyplatform
import shlex
import shutil
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import baseline  # noqa: E402
import mirrors  # noqa: E402
import pypiindex  # noqa: E402
import targets  # noqa: E402
import uvcompare  # noqa: E402

PLATFORMS = ("linux-x86_64", "windows-x86_64")
LINKS = ("cdn", "loopback")
LOCAL = "local"          # the link of the cases that read nothing from a server
LINK_MODES = ("clone", "hardlink", "copy")
# timed over each link: they download
NET_CASES = ("baseline", "cold", "cold-direct", "warm-archives", *uvcompare.NET_CASES)
# timed once per platform and repetition (after the first link's cold run filled the cache)
LOCAL_CASES = (*(f"warm-{m}" for m in LINK_MODES), "cp -a", "no-op", *uvcompare.LOCAL_CASES)
REFERENCES = ("cp -a", "pypi-cp -a")  # timed twice, the faster kept (one_link)
CASES = ("baseline", "cold", "cold-direct", "warm-archives", *(f"warm-{m}" for m in LINK_MODES), "cp -a",
         "no-op", *uvcompare.CASES)  # the table's order
CUDAREDIST_CASES = tuple(c for c in CASES if c not in ("baseline", *REFERENCES)
                         and not c.startswith("uv-"))
MB = 1e6


_SCRUB = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
          "no_proxy", "CUDAREDIST_BASE_URL", "CUDAREDIST_MIRROR", "CUDAREDIST_CACHE_DIR",
          "CUDAREDIST_LOCK_TIMEOUT", "CUDAREDIST_SOURCE", "CUDAREDIST_LINK_MODE", "CUDAREDIST_INDEX_URL",
          "PIP_INDEX_URL", "PYTHONDONTWRITEBYTECODE", "UV_CACHE_DIR", "UV_INDEX_URL", "UV_LINK_MODE",
          "UV_OFFLINE", "UV_PYTHON")
# PYTHONDONTWRITEBYTECODE: an installed package has its bytecode (pip compiles it); without it every
# run of the repo's editable install would compile the package's sources again (0.1-0.2 s)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class Config:
    reps: int
    platforms: list[str]
    links: list[str]
    with_nvrtc: bool
    conn_rate: float         # bytes/s
    agg_rate: float          # bytes/s
    ttfb: float              # seconds
    timeout: float
    cores: int
    cudaredist: list[str]
    python: str
    extra_args: list[str]
    quiet_wait: float
    noise: float
    retries: int
    pypi: bool = True        # time `--source pypi` against a loopback index of the same wheels
    uv: list[str] = field(default_factory=list)  # uv, timed on the same wheels (empty: left out)
    deadline: float = 0.0    # monotonic time after which disturbed timings are not waited for or repeated


@dataclass
class Sample:
    rep: int
    platform: str
    link: str
    case: str
    wall: float
    rss_mb: float
    cpu: float
    exit_code: int
    server: dict[str, int] = field(default_factory=dict)
    background: float = 0.0  # cores that other processes kept busy during the timing
    attempts: int = 1        # timings taken; the one with the least background is kept
    note: str = ""


# -- processes and load ----------------------------------------------------------------------------
def run_child(cmd: list[str], *, env: dict[str, str], timeout: float,
              out: Path) -> tuple[float, float, float, int]:
    """Run ``cmd``; (wall s, peak RSS MB, CPU s, exit code) of that child alone (stdout/err to files)."""
    with open(out.with_suffix(".stdout"), "wb") as so, open(out.with_suffix(".stderr"), "wb") as se:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=so, stderr=se, env=env)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status, ru = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
            proc.returncode = os.waitstatus_to_exitcode(status)
        finally:
            timer.cancel()
    return wall, ru.ru_maxrss * 1024 / MB, ru.ru_utime + ru.ru_stime, proc.returncode  # maxrss: KiB


_HZ = os.sysconf("SC_CLK_TCK")


def busy_seconds() -> float:
    """CPU seconds the whole machine has been busy since boot (/proc/stat)."""
    try:
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return 0.0
    return (sum(f) - f[3] - f[4]) / _HZ  # minus idle and iowait


def own_cpu_seconds(pids: list[int]) -> float:
    """CPU of this harness and of the servers (part of the simulated link, not background)."""
    t = os.times()
    total = t.user + t.system
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
            total += (int(f[11]) + int(f[12])) / _HZ
    return total


class LoadMeter:
    """Cores kept busy by other processes between construction and ``load(child_cpu)``."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.t0, self.b0, self.o0 = time.monotonic(), busy_seconds(), own_cpu_seconds(pids)

    def load(self, child_cpu: float = 0.0) -> float:
        others = busy_seconds() - self.b0 - (own_cpu_seconds(self.pids) - self.o0) - child_cpu
        return max(0.0, others / max(1e-3, time.monotonic() - self.t0))


def wait_until_quiet(cfg: Config, pids: list[int]) -> None:
    """Wait, at most ``cfg.quiet_wait`` s and only before the deadline, for other processes to calm down."""
    if time.monotonic() >= cfg.deadline:
        return
    until = time.monotonic() + cfg.quiet_wait
    while time.monotonic() < until:
        meter = LoadMeter(pids)
        time.sleep(0.5)
        if meter.load() < cfg.noise:
            return


class Server:
    """One cdnserver.py process, stopped through its Popen handle."""

    def __init__(self, name: str, root: Path, *, conn_rate: float, agg_rate: float, ttfb: float,
                 max_seconds: float) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "cdnserver.py"), "--root", str(root), "--conn-rate", str(conn_rate),
             "--agg-rate", str(agg_rate), "--ttfb", str(ttfb), "--max-seconds", str(max_seconds)],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://127.0.0.1:"):
            self.stop()
            raise SystemExit(f"cdnserver ({name}) did not start")
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def stats(self, reset: bool = False) -> dict[str, int]:
        with self._opener.open(self.url + "__stats__" + ("?reset=1" if reset else ""), timeout=10) as r:
            data: dict[str, int] = json.load(r)
        data["requests"] -= 1  # this one
        return data

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def serve_root(work: Path, mirror: mirrors.Mirror, index: Path | None) -> Path:
    """One root for both sources: ``redist/`` (the mirror) and ``pypi/`` (``simple/``, ``files/``)."""
    root = work / "serve"
    root.mkdir()
    (root / "redist").symlink_to(mirror.root, target_is_directory=True)
    if index is not None:
        (root / "pypi").symlink_to(index, target_is_directory=True)
    return root


@contextlib.contextmanager
def servers(root: Path, cfg: Config) -> Iterator[dict[str, Server]]:
    lifetime = 1800.0 + cfg.reps * 1200
    running: dict[str, Server] = {}
    try:
        for link in cfg.links:
            throttled = link == "cdn"
            running[link] = Server(link, root, conn_rate=cfg.conn_rate if throttled else 0,
                                   agg_rate=cfg.agg_rate if throttled else 0,
                                   ttfb=cfg.ttfb if throttled else 0, max_seconds=lifetime)
        yield running
    finally:
        for s in running.values():
            s.stop()


# -- pure references ---------------------------------------------------------------------------------
def decompress_seconds(path: Path) -> float:
    """Decompress every member of one archive into nothing."""
    t0 = time.perf_counter()
    if path.suffix in (".zip", ".whl"):
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if not info.is_dir():
                    with zf.open(info) as src:
                        while src.read(1 << 20):
                            pass
    else:
        with lzma.open(path) as src:  # the tar layer costs nothing next to xz
            while src.read(1 << 20):
                pass
    return time.perf_counter() - t0


def extract_seconds(path: Path, dest: Path) -> float:
    """Plain tarfile/zipfile extraction of one archive into a fresh directory, no hashing."""
    os.sync()
    t0 = time.perf_counter()
    baseline.extract_all(path, dest)
    elapsed = time.perf_counter() - t0
    shutil.rmtree(dest)
    return elapsed


def create_seconds(work: Path, n: int = 1000) -> float:
    """Seconds to create (and close) one empty file in a fresh folder of the work dir: installs
    create every file of the tree (the unpacked cache and the prefix), so this disk's cost bounds
    them, and it differs a lot between filesystems (and, on ext4, with the state of the disk)."""
    d = work / "create-probe"
    d.mkdir()
    try:
        t0 = time.perf_counter()
        for i in range(n):
            os.close(os.open(d / f"f{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        return (time.perf_counter() - t0) / n
    finally:
        shutil.rmtree(d)


def work_filesystem(work: Path) -> dict[str, Any]:
    """The filesystem under ``work`` (Linux ``/proc/self/mountinfo``): its type, device, and for ext4
    whether it keeps a journal. Without one (``mkfs.ext4 -O ^has_journal``, some VM images) ext4
    skips every inode deleted in the last ``dirty_expire_centisecs`` (30 s) when it creates a file, and
    each skip reads the inode table: right after a benchmark case deletes its tree, creating one
    file costs 0.6-0.9 ms of system CPU instead of 0.02 ms, and every case that creates files
    measures the disk, not the installer (stop 40)."""
    real = os.path.realpath(work)
    best: dict[str, Any] = {"type": "?", "device": "?", "mount": "/", "journal": None}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            mount, (fstype, device, *_rest) = left.split()[4], right.split()
            inside = real == mount or real.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) >= len(best["mount"]):
                best = {"type": fstype, "device": device, "mount": mount, "journal": None}
    if best["type"] == "ext4":
        with contextlib.suppress(OSError):
            task = Path(f"/sys/fs/ext4/{os.path.basename(best['device'])}/journal_task").read_text().strip()
            best["journal"] = task != "<none>"
    return best


def describe_filesystem(fs: dict[str, Any]) -> str:
    journal = {True: ", with a journal", False: ", WITHOUT a journal", None: ""}[fs["journal"]]
    line = f"work dir: {fs['type']} on {fs['device']} (mounted at {fs['mount']}){journal}"
    if fs["journal"] is False:
        line += ("\nWARNING: ext4 without a journal skips recently deleted inodes on every create "
                 "(0.6-0.9 ms a file after a case deletes its tree): the cases that create files "
                 "time the disk. Runners' ext4 has a journal; see benchmarks/README.md, "
                 "\"File creation on this machine\"")
    return line


def makespan(times: list[float], cores: int) -> float:
    """Longest-first greedy schedule of independent jobs on ``cores`` workers: the finishing time."""
    if not times:
        return 0.0
    loads = [0.0] * max(1, min(cores, len(times)))
    for t in sorted(times, reverse=True):
        loads[loads.index(min(loads))] += t
    return max(loads)


def pure_times(cfg: Config, paths: list[Path], pids: list[int],
               work: Path) -> tuple[list[float], list[float], float]:
    """Per-archive pure decompression and extraction seconds, and the background load meanwhile.

    These are lower bounds, so a disturbed pass is repeated and the per-archive minimum kept.
    """
    dec = [float("inf")] * len(paths)
    ext = [float("inf")] * len(paths)
    bg = float("inf")
    for attempt in range(1 + cfg.retries):
        wait_until_quiet(cfg, pids)
        meter = LoadMeter(pids)
        dec = [min(best, decompress_seconds(p)) for best, p in zip(dec, paths, strict=True)]
        ext = [min(best, extract_seconds(p, work / f"pure-{i}"))
               for i, (best, p) in enumerate(zip(ext, paths, strict=True))]
        load = meter.load()
        bg = min(bg, load)
        if load <= cfg.noise or time.monotonic() > cfg.deadline or attempt == cfg.retries:
            break
        log(f"  {load:.2f} cores were busy with other processes: timing the pure references again")
    return dec, ext, bg


# -- the run -------------------------------------------------------------------------------------------
def tree_files(root: Path) -> set[str]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            out.add(name if rel == "." else f"{rel}/{name}")
    return out


def measure(cfg: Config, mirror: mirrors.Mirror, index: Path | None,
            work: Path) -> tuple[list[Sample], list[dict[str, Any]]]:
    specs = mirrors.components(cfg.with_nvrtc)
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    samples: list[Sample] = []
    refs: list[dict[str, Any]] = []
    with servers(serve_root(work, mirror, index), cfg) as running:
        pids = [s.proc.pid for s in running.values()]
        for rep in range(cfg.reps):
            for plat in cfg.platforms:
                archives = mirror.archives(plat, specs)
                dec, ext, bg = pure_times(cfg, [mirror.root / a.relative_path for a in archives], pids, work)
                wheels = pypiindex.wheels_for(index, plat) if index is not None else []
                wdec = [decompress_seconds(w) for w in wheels]
                create = create_seconds(work)
                names = [a.filename for a in archives]
                ref = {"rep": rep, "platform": plat, "archives": len(archives), "background": bg,
                       "bytes": sum(a.size for a in archives),
                       "decompress": dict(zip(names, dec, strict=True)), "decompress_sum": sum(dec),
                       "decompress_makespan": makespan(dec, cfg.cores),
                       "decode_longest": max(dec), "decode_over_cores": sum(dec) / cfg.cores,
                       "decode_floor": max(max(dec), sum(dec) / cfg.cores),
                       "extract": dict(zip(names, ext, strict=True)), "extract_sum": sum(ext),
                       "extract_makespan": makespan(ext, cfg.cores),
                       "create_ms": create * 1000,
                       "wheels": len(wheels), "wheel_bytes": sum(w.stat().st_size for w in wheels),
                       "wheel_decompress": {w.name: t for w, t in zip(wheels, wdec, strict=True)},
                       "wheel_decode_longest": max(wdec, default=0.0),
                       "wheel_decode_floor": max(max(wdec, default=0.0), sum(wdec) / cfg.cores)}
                refs.append(ref)
                log(f"[rep {rep + 1}/{cfg.reps}] {plat}: decode floor {ref['decode_floor']:.2f}s (longest "
                    f"archive {ref['decode_longest']:.2f}s, {sum(dec):.2f}s over {cfg.cores} cores), "
                    f"pure extraction {sum(ext):.2f}s (makespan {ref['extract_makespan']:.2f}s); "
                    f"wheels: decode floor {ref['wheel_decode_floor']:.2f}s; "
                    f"creating a file {create * 1000:.2f} ms; bg {bg:.2f}")
                order = list(cfg.links if rep % 2 == 0 else reversed(cfg.links))
                for i, link in enumerate(order):
                    samples += one_link(cfg, running[link], pids, mirror, plat, specs, rep, work, env,
                                        local=i == 0, wheels=len(wheels))
    return samples, refs


def one_link(cfg: Config, server: Server, pids: list[int], mirror: mirrors.Mirror, plat: str,
             specs: tuple[str, ...], rep: int, work: Path, env: dict[str, str], *, local: bool,
             wheels: int) -> list[Sample]:
    """The cases, in order, for one platform over one link (and, with ``local``, those that read
    no server: from the unpacked cache that this link's runs filled, `cp -a`, no-op)."""
    d = work / f"{plat}-{server.name}-{rep}"
    d.mkdir(parents=True)
    redist = server.url + "redist/"
    # exactly the mirror's components, the ones uv gets through the same extras (the nvcc profile
    # grew header-only components since the mirror was defined)
    only = ["--only", *(a for spec in specs for a in ("-c", spec))]
    install = [*cfg.cudaredist, "install", mirror.label, "--platform", plat, "--json", *only,
               *cfg.extra_args]
    redist_install = [*install, "--base-url", redist, "--cache-dir", str(d / "cache")]
    cmds = {
        "baseline": [cfg.python, str(HERE / "baseline.py"), "--base-url", redist, "--release",
                     mirror.label, "--platform", plat, "--dest", str(d / "baseline"), *specs],
        "cold": [*redist_install, "--prefix", str(d / "cold")],
        # a runner's cold install: no unpacked entry kept (the archives are, for warm-archives)
        "cold-direct": [*redist_install, "--prefix", str(d / "cold-direct"), "--no-cache-unpacked"],
        "warm-archives": [*redist_install, "--prefix", str(d / "warm-archives")],
        **{f"warm-{m}": [*redist_install, "--prefix", str(d / f"warm-{m}"), "--link-mode", m]
           for m in LINK_MODES},
        "cp -a": ["cp", "-a", str(d / "cold"), str(d / "cp-a")],
        "no-op": [*redist_install, "--prefix", str(d / "warm-clone"), "--link-mode", "clone"],
        **uvcompare.commands(cfg, server.url + "pypi/simple/", install, plat, d, specs),
    }
    fresh = {"baseline": ["baseline"], "cold": ["cold", "cache"], "cold-direct": ["cold-direct", "cache"],
             "warm-archives": ["warm-archives", "cache/unpacked"],  # archives cached, nothing unpacked
             **{f"warm-{m}": [f"warm-{m}"] for m in LINK_MODES}, "cp -a": ["cp-a"], "no-op": [],
             **uvcompare.FRESH}
    cases = [c for c in uvcompare.order(CASES, rep) if (c in NET_CASES or local) and c in cmds
             and (c not in uvcompare.CASES or wheels)]
    out: list[Sample] = []
    for case in cases:
        best: Sample | None = None
        # a reference (cp -a) at its best: the faster of two copies. The first copy of the PyPI tree
        # took 0.6-0.75 s of system time in copy_file_range against 0.12-0.14 s for the second (into
        # the blocks the first freed; the source's pages were resident both times: the filesystem's
        # block allocation, not the read), which "met" the warm-default target at 0.29x.
        reference = case in REFERENCES
        tries = 1 + max(cfg.retries, 1 if reference else 0)
        for attempt in range(tries):
            for name in fresh[case]:
                shutil.rmtree(d / name, ignore_errors=True)
            s = timed(cfg, server, pids, cmds[case], d / case.replace(" ", ""), env, rep, plat, case)
            if case in LOCAL_CASES:
                s.link = LOCAL
            s.attempts = attempt + 1
            s.note = check(s, d / case.replace(" ", ""), case,
                           wheels if case.startswith("pypi-") else len(specs))
            log(f"[rep {rep + 1}/{cfg.reps}] {plat} {s.link:8} {case:13} {s.wall:6.2f}s "
                f"{s.rss_mb:6.1f} MB  cpu {s.cpu:5.2f}s  bg {s.background:4.2f}  "
                f"{s.server.get('requests', 0)} req, peak {s.server.get('peak_connections', 0)} conn"
                f"{'  ' + s.note if s.note else ''}")
            if s.exit_code:
                log((d / case.replace(" ", "")).with_suffix(".stderr").read_text()[-2000:])
            quiet = s.background <= cfg.noise
            if best is None or (s.background < best.background if not reference
                                else (quiet, -s.wall) > (best.background <= cfg.noise, -best.wall)):
                best = s
            if s.exit_code or attempt == tries - 1:
                break
            if reference and attempt == 0:  # the second copy is part of the case, whatever the budget
                continue
            if quiet or reference or time.monotonic() > cfg.deadline:
                break
            log(f"  {s.background:.2f} cores were busy with other processes: timing {case} again")
        assert best is not None
        out.append(best)
        if case == "cold" and rep == 0 and not best.exit_code:
            # the two installers must have done the same work
            missing = tree_files(d / "baseline") - tree_files(d / "cold") - {"LICENSE", "LICENSE.txt"}
            if missing:
                best.note += (f" the cold tree lacks {len(missing)} files of the baseline's: "
                              f"{sorted(missing)[:3]}")
                log(f"  WARNING: {best.note}")
        if case in uvcompare.SAME_TREE and rep == 0 and not best.exit_code:
            prefix, origin = uvcompare.SAME_TREE[case]
            if tree_files(d / prefix) != tree_files(d / origin):
                best.note += " its tree differs from the cold one"
                log(f"  WARNING: {case}: {best.note}")
    shutil.rmtree(d)
    return out


def timed(cfg: Config, server: Server, pids: list[int], cmd: list[str], out: Path, env: dict[str, str],
          rep: int, plat: str, case: str) -> Sample:
    os.sync()  # the write-back of the previous run's tree must not land in this one
    wait_until_quiet(cfg, pids)
    server.stats(reset=True)
    meter = LoadMeter(pids)
    wall, rss, cpu, code = run_child(cmd, env=env, timeout=cfg.timeout, out=out)
    return Sample(rep, plat, server.name, case, wall, rss, cpu, code, server.stats(),
                  background=meter.load(cpu))


def check(s: Sample, out: Path, case: str, archives: int) -> str:
    """A note when the child did not do what the case means (failed, downloaded on a warm run...)."""
    if s.exit_code:
        return f"FAILED (exit {s.exit_code}; see stderr)"
    if case in ("baseline", *REFERENCES) or case.startswith("uv-"):
        return ""
    try:
        res = json.loads(out.with_suffix(".stdout").read_text())
    except ValueError:
        return "no JSON on stdout"
    warm = (False, 0, archives)
    cold = (False, archives, 0)  # cold-direct too: its case starts without a cache
    want = {"cold": cold, "cold-direct": cold, "pypi-cold": cold,
            "no-op": (True, 0, 0), "pypi-no-op": (True, 0, 0)}.get(case, warm)
    got = (bool(res.get("noop")), int(res.get("downloaded", 0)), int(res.get("cached", 0)))
    return "" if got == want else f"noop/downloaded/cached = {got}, expected {want}"


# -- report --------------------------------------------------------------------------------------
def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


REF_KEYS = ("decompress_sum", "decompress_makespan", "decode_longest", "decode_over_cores", "decode_floor",
            "extract_sum", "extract_makespan", "background", "wheel_decode_longest", "wheel_decode_floor",
            "create_ms")


def summarize(cfg: Config, samples: list[Sample], refs: list[dict[str, Any]]) -> dict[str, Any]:
    references: dict[str, dict[str, float]] = {}
    cases: dict[str, dict[str, Any]] = {}
    for plat in cfg.platforms:
        r = [x for x in refs if x["platform"] == plat]
        ref = {k: _med([float(x[k]) for x in r]) for k in REF_KEYS}
        for k in ("archives", "bytes", "wheels", "wheel_bytes"):
            ref[k] = r[0][k]
        ref["download_at_aggregate_cap"] = ref["bytes"] / cfg.agg_rate if cfg.agg_rate > 0 else 0.0
        references[plat] = ref
        first_base = None
        for link in [*cfg.links, LOCAL]:
            base = _med([s.wall for s in samples if (s.platform, s.link, s.case) == (plat, link, "baseline")])
            first_base = base if first_base is None else first_base
            for case in CASES:
                ss = [s for s in samples if (s.platform, s.link, s.case) == (plat, link, case)]
                if not ss:
                    continue
                wall = _med([s.wall for s in ss])
                floor = ref["wheel_decode_floor"] if case in uvcompare.CASES else ref["decode_floor"]
                cases[f"{plat}/{link}/{case}"] = {
                    "platform": plat, "link": link, "case": case, "n": len(ss),
                    "wall": wall, "wall_min": min(s.wall for s in ss), "wall_max": max(s.wall for s in ss),
                    "rss_mb": _med([s.rss_mb for s in ss]), "rss_mb_max": max(s.rss_mb for s in ss),
                    "cpu": _med([s.cpu for s in ss]), "background": _med([s.background for s in ss]),
                    "requests": _med([s.server.get("requests", 0) for s in ss]),
                    "peak_connections": max(s.server.get("peak_connections", 0) for s in ss),
                    "speedup": (base if link != LOCAL else first_base) / wall,
                    "x_floor": wall / ref["decode_floor"], "x_longest": wall / ref["decode_longest"],
                    "x_own_floor": wall / floor if floor else float("nan"),
                    "failures": sum(s.exit_code != 0 for s in ss),
                    "notes": sorted({s.note for s in ss if s.note}),
                }
    summary = {"references": references, "cases": cases,
               "targets": targets.check(cfg, cases, references, local=LOCAL, mine=CUDAREDIST_CASES)}
    return summary


def render(cfg: Config, summary: dict[str, Any], header: str) -> str:
    refs: dict[str, dict[str, float]] = summary["references"]
    lines = [header, "",
             f"{'platform':15} {'link':8} {'case':18} {'wall s':>7} {'min-max':>13} {'RSS MB':>7} "
             f"{'CPU s':>6} {'bg':>5} {'req':>4} {'conn':>4} {'speedup':>8} {'x floor':>8} {'x longest':>9}"]
    for c in summary["cases"].values():
        noisy = "!" if c["background"] > cfg.noise else " "
        own = f" (x{c['x_own_floor']:.2f} wheel floor)" if c["case"] in uvcompare.CASES else ""
        lines.append(
            f"{c['platform']:15} {c['link']:8} {c['case']:18} {c['wall']:7.2f} "
            f"{c['wall_min']:6.2f}-{c['wall_max']:<6.2f} {c['rss_mb']:7.1f} {c['cpu']:6.2f} "
            f"{c['background']:4.2f}{noisy} {c['requests']:4.0f} {c['peak_connections']:4.0f} "
            f"{c['speedup']:7.2f}x {c['x_floor']:7.2f}x {c['x_longest']:8.2f}x" + own
            + (" FAILED" if c["failures"] else ""))
    lines += [
        "",
        "warm-archives: archive cache full, unpacked cache empty. warm-MODE: from the unpacked cache with",
        "--link-mode MODE, a fresh prefix each. cp -a: the cold tree copied (copy mode's reference). no-op:",
        "warm-clone's command again. pypi-*: --source pypi from a loopback index of the same wheels,",
        "uv-*: uv pip install --target of them (see the comparison below).",
        "local: reads no server. RSS: peak RSS of the child. CPU: its user+sys. bg: cores other processes",
        f"kept busy meanwhile (! = over {cfg.noise:g}, disturbed). req/conn: requests and peak concurrent",
        "connections at the server. speedup: the baseline's wall (local: the first link's) / wall.",
        "x floor: wall / decode floor. x longest: wall / the longest single archive's decode.",
        ""]
    rows: list[tuple[str, Callable[[dict[str, float]], str]]] = [
        ("archives", lambda r: f"{r['archives']:.0f}, {r['bytes'] / MB:.1f} MB"),
        (f"download at {cfg.agg_rate / MB:g} MB/s aggregate",
         lambda r: f"{r['download_at_aggregate_cap']:.2f} s"),
        ("decode, longest single archive (1 core)", lambda r: f"{r['decode_longest']:.2f} s"),
        (f"decode, all archives / {cfg.cores} cores", lambda r: f"{r['decode_over_cores']:.2f} s"),
        ("decode floor (the larger of the two)", lambda r: f"{r['decode_floor']:.2f} s"),
        ("decode, sum", lambda r: f"{r['decompress_sum']:.2f} s"),
        (f"pure extraction, makespan on {cfg.cores} cores", lambda r: f"{r['extract_makespan']:.2f} s"),
        ("creating one empty file (work dir)", lambda r: f"{r['create_ms']:.3f} ms"),
        ("wheels", lambda r: f"{r['wheels']:.0f}, {r['wheel_bytes'] / MB:.1f} MB"),
        ("wheels: decode floor (longest, cores)", lambda r: f"{r['wheel_decode_floor']:.2f} s"),
        ("background load during these timings", lambda r: f"{r['background']:.2f} cores"),
    ]
    lines.append(f"{'reference (medians)':44}" + "".join(f"{p:>16}" for p in cfg.platforms))
    for name, fmt in rows:
        lines.append(f"  {name:42}" + "".join(f"{fmt(refs[p]):>16}" for p in cfg.platforms))
    lines += uvcompare.render(cfg, summary, LOCAL)
    lines += ["", f"targets ({targets.ISSUE}: benchmarks/targets.py)"]
    for t in summary["targets"]:
        value = f"{t['value']:.2f}{t['unit']}"
        goal = f"{t['op']} {t['goal']:g}{t['unit']}"
        lines.append(f"  {'PASS' if t['pass'] else 'MISS'}  {t['what']:58} {value:>9}  (target {goal}, "
                     f"margin {100 * t['margin']:+.0f}%)")
    met = sum(bool(t["pass"]) for t in summary["targets"])
    lines.append(f"  {met} of {len(summary['targets'])} targets met")
    return "\n".join(lines)


def lean_venv(work: Path, uv: list[str]) -> Path | None:
    """The package in a venv of its own (its runtime dependencies only, bytecode compiled), as a
    user gets it: the repo's .venv also holds the test tools, whose .pth hooks (numba-cuda's) cost
    every interpreter start 30-60 ms. Editable, so it runs this checkout. None if uv cannot make it."""
    venv = work / "venv-cudaredist"
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB and k != "VIRTUAL_ENV"}
    try:
        subprocess.run([*uv, "venv", "-q", "--allow-existing", "--python", sys.executable, str(venv)],
                       check=True, env=env, timeout=300)
        subprocess.run([*uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "-e",
                        str(REPO)], check=True, env=env, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        log(f"lean venv: {exc}; timing the repo's .venv instead")
        return None
    log(f"cudaredist: {venv}/bin/cudaredist (its own venv, editable)")
    return venv / "bin" / "cudaredist"


def package_fingerprint() -> str:
    """A hash of the package's source: other people may be editing it while the benchmark runs."""
    import hashlib

    h = hashlib.sha256()
    for p in sorted((REPO / "cudaredist").rglob("*.py")):
        h.update(p.relative_to(REPO).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def _git() -> dict[str, str]:
    def run(*args: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                                  timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"commit": run("rev-parse", "HEAD"), "package_changes": run("status", "--porcelain", "cudaredist")}


# -- command line ----------------------------------------------------------------------------------
def parse(argv: list[str] | None) -> tuple[argparse.Namespace, Config]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 rep, linux-x86_64 only, no waiting for quiet or re-timing")
    ap.add_argument("--platforms", default=",".join(PLATFORMS), help="comma list (default: both)")
    ap.add_argument("--links", default=",".join(LINKS), help="comma list of cdn, loopback (default: both)")
    ap.add_argument("--with-nvrtc", action="store_true", help="add cuda_nvrtc, the biggest archive")
    ap.add_argument("--mirror", default="auto",
                    help="auto (pypi when ../shared/tools/pypi-mirror.sh exists, else synthetic), pypi, "
                         "synthetic, or the directory of a mirror to reuse, e.g. /tmp/mirror1302")
    ap.add_argument("--xz-preset", type=int, default=1, help="xz preset of the mirrors built (default 1)")
    ap.add_argument("--work-dir", type=Path,
                    default=Path(os.environ.get("TMPDIR", "/tmp")) / "cudaredist-bench",
                    help="built mirrors (kept for later runs) and run trees (deleted)")
    ap.add_argument("--conn-rate", type=float, default=20.0, help="cdn: MB/s per connection (default 20)")
    ap.add_argument("--agg-rate", type=float, default=200.0, help="cdn: MB/s, all connections (default 200)")
    ap.add_argument("--ttfb", type=float, default=25.0, help="cdn: ms to first byte per request (default 25)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds before a child is killed")
    ap.add_argument("--noise", type=float, default=0.3,
                    help="background load in cores above which a timing counts as disturbed (default 0.3)")
    ap.add_argument("--quiet-wait", type=float,
                    help="before each timing wait up to this many seconds for the machine to go quiet "
                         "(default 10; --quick: 0)")
    ap.add_argument("--retries", type=int,
                    help="re-time a disturbed case up to this many times and keep the quietest "
                         "(default 2; --quick: 0)")
    ap.add_argument("--budget", type=float, default=300.0,
                    help="seconds a full run (3 reps x 2 platforms x 2 links; scaled to the run) may spend "
                         "before it stops waiting for quiet and re-timing (default 300)")
    ap.add_argument("--cudaredist", help="the command to time (default: the repo's .venv/bin/cudaredist)")
    ap.add_argument("--cudaredist-args", default="", help="extra install arguments, e.g. '--jobs 4'")
    ap.add_argument("--repo-venv", action="store_true",
                    help="time the repo's .venv/bin/cudaredist (default: a venv of its own in --work-dir, "
                         "made with uv, without the test tools' start-up hooks)")
    ap.add_argument("--json-out", type=Path, help="write samples, references, medians and targets here")
    ap.add_argument("--no-pypi", action="store_true", help="leave out the --source pypi and uv cases")
    ap.add_argument("--uv", help="the uv to time on the same wheels (default: the venv's, from the bench "
                                 "extra, else PATH's)")
    ap.add_argument("--no-uv", action="store_true", help="leave uv out")
    ap.add_argument("--chart", type=Path, default=None,
                    help="write a PNG chart of the cases here (needs matplotlib, the bench extra)")
    ap.add_argument("--wheels", type=Path,
                    help="a folder of the 13.0.2 wheels for the pypi case (default: cudaredist caches named "
                         "by $CUDAREDIST_TEST_CACHE / $CUDAREDIST_CACHE_DIR, pypi-mirror.sh's wheel cache, "
                         "else pip download into --work-dir)")
    a = ap.parse_args(argv)
    if a.quick:
        a.reps, a.platforms = 1, "linux-x86_64"
    if a.quiet_wait is None:
        a.quiet_wait = 0.0 if a.quick else 10.0
    if a.retries is None:
        a.retries = 0 if a.quick else 2
    venv = REPO / ".venv" / "bin"
    default_cmd = [str(venv / "cudaredist")] if (venv / "cudaredist").exists() else [sys.executable, "-m",
                                                                                      "cudaredist"]
    cfg = Config(
        reps=max(1, a.reps), platforms=[p for p in a.platforms.split(",") if p],
        links=[x for x in a.links.split(",") if x], with_nvrtc=a.with_nvrtc,
        conn_rate=a.conn_rate * MB, agg_rate=a.agg_rate * MB, ttfb=a.ttfb / 1000, timeout=a.timeout,
        cores=len(os.sched_getaffinity(0)),
        cudaredist=shlex.split(a.cudaredist) if a.cudaredist else default_cmd,
        python=str(venv / "python") if (venv / "python").exists() else sys.executable,
        extra_args=shlex.split(a.cudaredist_args), quiet_wait=a.quiet_wait, noise=a.noise,
        retries=max(0, a.retries), pypi=not a.no_pypi,
        uv=[] if a.no_uv else uvcompare.find_uv(a.uv, venv))
    bad = [p for p in cfg.platforms if p not in PLATFORMS] + [x for x in cfg.links if x not in LINKS]
    if bad or not cfg.platforms or not cfg.links:
        ap.error(f"unknown or missing platform or link: {', '.join(bad) or '(none given)'}")
    return a, cfg


def main(argv: list[str] | None = None) -> int:
    a, cfg = parse(argv)
    t0 = time.monotonic()
    a.work_dir.mkdir(parents=True, exist_ok=True)
    mirror = mirrors.obtain(a.mirror, a.work_dir, platforms=cfg.platforms, with_nvrtc=cfg.with_nvrtc,
                            shared=REPO.parent / "shared", xz_preset=a.xz_preset, log=log)
    if not a.cudaredist and not a.repo_venv and cfg.uv:
        lean = lean_venv(a.work_dir, cfg.uv)
        if lean is not None:
            cfg.cudaredist = [str(lean)]
    before = package_fingerprint()
    # bytecode for the package, as an installed one has (see _SCRUB)
    subprocess.run([cfg.python, "-m", "compileall", "-q", str(REPO / "cudaredist")], check=False,
                   stdout=subprocess.DEVNULL, env={k: v for k, v in os.environ.items() if k not in _SCRUB})
    cfg.deadline = time.monotonic() + a.budget * cfg.reps * len(cfg.platforms) * len(cfg.links) / 12
    work = a.work_dir / f"run-{os.getpid()}"
    work.mkdir()
    fs = work_filesystem(work)
    if fs["journal"] is False:
        log(describe_filesystem(fs))
    try:
        index = (pypiindex.build_index(a.work_dir, cfg.platforms, with_nvrtc=cfg.with_nvrtc,
                                       wheels_dir=a.wheels, log=log) if cfg.pypi else None)
        samples, refs = measure(cfg, mirror, index, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = summarize(cfg, samples, refs)
    after = package_fingerprint()
    changed = "" if after == before else (f"WARNING: cudaredist/ changed during the run (source {before} -> "
                                          f"{after}); the timings mix versions of the package")
    kind = {"pypi": "real archives built by pypi-mirror.sh", "reused": "real archives (reused mirror)",
            "synthetic": "synthetic archives of the real sizes"}[mirror.kind]
    uv_version = ""
    if cfg.uv:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            uv_version = subprocess.run([*cfg.uv, "--version"], capture_output=True, text=True,
                                        timeout=20).stdout.strip()
    header = (f"cudaredist install benchmark: CUDA {mirror.label}, the nvcc profile's five components"
              f"{' + cuda_nvrtc' if cfg.with_nvrtc else ''}; {kind}\n"
              f"{cfg.reps} rep(s), medians; {cfg.cores} cores; cdn link: {cfg.conn_rate / MB:g} MB/s per "
              f"connection, {cfg.agg_rate / MB:g} MB/s aggregate, {cfg.ttfb * 1000:g} ms to first byte; "
              f"loopback: unthrottled; {uv_version or 'uv: not found (left out)'}\n"
              f"{describe_filesystem(fs)}" + (f"\n{changed}" if changed else ""))
    text = render(cfg, summary, header)
    print(text)
    if a.chart is not None:
        import chart

        chart.write(a.chart, cfg, summary, header.splitlines()[0], local=LOCAL)
        log(f"chart: {a.chart}")
    log(f"total {time.monotonic() - t0:.0f}s; mirror {mirror.root}; cudaredist: "
        f"{' '.join(cfg.cudaredist + cfg.extra_args)}")
    if a.json_out:
        a.json_out.write_text(json.dumps({
            "config": {k: v for k, v in asdict(cfg).items() if k != "deadline"},
            "mirror": {"root": str(mirror.root), "kind": mirror.kind, "label": mirror.label},
            "host": {"python": sys.version, "machine": pyplatform.platform(), "cores": cfg.cores,
                     "work_filesystem": fs},
            "git": _git(), "package_source": {"before": before, "after": after},
            "seconds": time.monotonic() - t0, "samples": [asdict(s) for s in samples],
            "references": refs, "summary": summary, "table": text}, indent=1) + "\n")
    return 1 if any(s.exit_code for s in samples) else 0


if __name__ == "__main__":
    sys.exit(main())
