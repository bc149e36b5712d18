"""Install benchmark: cudaredist against a plain sequential installer, over a simulated CDN link.

One run serves a CUDA 13.0.2 mirror from two loopback servers (``cdnserver.py``): "cdn"
(per-connection cap, aggregate cap, time to first byte) and "loopback" (unthrottled). For each
repetition, platform and link it runs, one after another and each as its own process:

  baseline  benchmarks/baseline.py: download -> sha256 -> extract -> merge, archive by archive
  cold      cudaredist install, empty cache, new prefix
  warm      cudaredist install, the cache that cold filled, new prefix
  no-op     cudaredist install again into warm's prefix (interpreter start included)

and takes wall time, CPU time and peak RSS of that child (``os.wait4``). In the same run it
times pure decompression and pure extraction of the archives, and from them the physical
limit: max(bytes / aggregate rate, decompression makespan over the cores). It prints medians,
ratios and PASS/MISS per target, and writes everything to ``--json-out``.

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

PLATFORMS = ("linux-x86_64", "windows-x86_64")
LINKS = ("cdn", "loopback")
CASES = ("baseline", "cold", "warm", "no-op")
MB = 1e6

# The targets of issue 3.
COLD_SPEEDUP = 3.0       # cold on the cdn link: at least this many times faster than the baseline
COLD_VS_LIMIT = 1.3      # ... and within this factor of the physical limit
WARM_VS_EXTRACT = 1.3    # warm: within this factor of pure extraction
NOOP_SECONDS = 0.5       # no-op re-run, interpreter start included
RSS_MB = 150.0           # peak RSS of every cudaredist run

_SCRUB = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
          "no_proxy", "CUDAREDIST_BASE_URL", "CUDAREDIST_MIRROR", "CUDAREDIST_CACHE_DIR",
          "CUDAREDIST_LOCK_TIMEOUT", "CUDAREDIST_SOURCE")


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


@contextlib.contextmanager
def servers(mirror: mirrors.Mirror, cfg: Config) -> Iterator[dict[str, Server]]:
    lifetime = 1800.0 + cfg.reps * 1200
    running: dict[str, Server] = {}
    try:
        for link in cfg.links:
            throttled = link == "cdn"
            running[link] = Server(link, mirror.root, conn_rate=cfg.conn_rate if throttled else 0,
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
    if path.suffix == ".zip":
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


def measure(cfg: Config, mirror: mirrors.Mirror, work: Path) -> tuple[list[Sample], list[dict[str, Any]]]:
    specs = mirrors.components(cfg.with_nvrtc)
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    samples: list[Sample] = []
    refs: list[dict[str, Any]] = []
    with servers(mirror, cfg) as running:
        pids = [s.proc.pid for s in running.values()]
        for rep in range(cfg.reps):
            for plat in cfg.platforms:
                archives = mirror.archives(plat, specs)
                dec, ext, bg = pure_times(cfg, [mirror.root / a.relative_path for a in archives], pids, work)
                names = [a.filename for a in archives]
                ref = {"rep": rep, "platform": plat, "archives": len(archives), "background": bg,
                       "bytes": sum(a.size for a in archives),
                       "decompress": dict(zip(names, dec, strict=True)), "decompress_sum": sum(dec),
                       "decompress_makespan": makespan(dec, cfg.cores),
                       "extract": dict(zip(names, ext, strict=True)), "extract_sum": sum(ext),
                       "extract_makespan": makespan(ext, cfg.cores)}
                refs.append(ref)
                log(f"[rep {rep + 1}/{cfg.reps}] {plat}: pure decompression {sum(dec):.2f}s (makespan "
                    f"{ref['decompress_makespan']:.2f}s), pure extraction {sum(ext):.2f}s (makespan "
                    f"{ref['extract_makespan']:.2f}s), bg {bg:.2f}")
                for link in cfg.links if rep % 2 == 0 else reversed(cfg.links):
                    samples += one_link(cfg, running[link], pids, mirror, plat, specs, rep, work, env)
    return samples, refs


def one_link(cfg: Config, server: Server, pids: list[int], mirror: mirrors.Mirror, plat: str,
             specs: tuple[str, ...], rep: int, work: Path, env: dict[str, str]) -> list[Sample]:
    """The four cases, in order, for one platform over one link."""
    d = work / f"{plat}-{server.name}-{rep}"
    d.mkdir(parents=True)
    install = [*cfg.cudaredist, "install", mirror.label, "--platform", plat, "--base-url", server.url,
               "--json", *(["-c", mirrors.NVRTC] if cfg.with_nvrtc else []), *cfg.extra_args]
    cmds = {
        "baseline": [cfg.python, str(HERE / "baseline.py"), "--base-url", server.url, "--release",
                     mirror.label, "--platform", plat, "--dest", str(d / "baseline"), *specs],
        "cold": [*install, "--prefix", str(d / "cold"), "--cache-dir", str(d / "cache")],
        "warm": [*install, "--prefix", str(d / "warm"), "--cache-dir", str(d / "cache")],
        "no-op": [*install, "--prefix", str(d / "warm"), "--cache-dir", str(d / "cache")],
    }
    fresh = {"baseline": ["baseline"], "cold": ["cold", "cache"], "warm": ["warm"], "no-op": []}
    out: list[Sample] = []
    for case in CASES:
        best: Sample | None = None
        for attempt in range(1 + cfg.retries):
            for name in fresh[case]:
                shutil.rmtree(d / name, ignore_errors=True)
            s = timed(cfg, server, pids, cmds[case], d / case, env, rep, plat, case)
            s.attempts = attempt + 1
            s.note = check(s, d / case, case, len(specs))
            log(f"[rep {rep + 1}/{cfg.reps}] {plat} {server.name:8} {case:8} {s.wall:6.2f}s "
                f"{s.rss_mb:6.1f} MB  cpu {s.cpu:5.2f}s  bg {s.background:4.2f}  "
                f"{s.server.get('requests', 0)} req, peak {s.server.get('peak_connections', 0)} conn"
                f"{'  ' + s.note if s.note else ''}")
            if s.exit_code:
                log((d / case).with_suffix(".stderr").read_text()[-2000:])
            if best is None or s.background < best.background:
                best = s
            if (s.exit_code or s.background <= cfg.noise or time.monotonic() > cfg.deadline
                    or attempt == cfg.retries):
                break
            log(f"  {s.background:.2f} cores were busy with other processes: timing {case} again")
        assert best is not None
        out.append(best)
        if case == "cold" and rep == 0 and not best.exit_code:
            # the two installers must have done the same work
            missing = tree_files(d / "baseline") - tree_files(d / "cold") - {"LICENSE"}
            if missing:
                best.note += (f" the cold tree lacks {len(missing)} files of the baseline's: "
                              f"{sorted(missing)[:3]}")
                log(f"  WARNING: {best.note}")
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
    if case == "baseline":
        return ""
    try:
        res = json.loads(out.with_suffix(".stdout").read_text())
    except ValueError:
        return "no JSON on stdout"
    want = {"cold": (False, archives, 0), "warm": (False, 0, archives), "no-op": (True, 0, 0)}[case]
    got = (bool(res.get("noop")), int(res.get("downloaded", 0)), int(res.get("cached", 0)))
    return "" if got == want else f"noop/downloaded/cached = {got}, expected {want}"


# -- report --------------------------------------------------------------------------------------
def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def summarize(cfg: Config, samples: list[Sample], refs: list[dict[str, Any]]) -> dict[str, Any]:
    references: dict[str, dict[str, float]] = {}
    cases: dict[str, dict[str, Any]] = {}
    for plat in cfg.platforms:
        r = [x for x in refs if x["platform"] == plat]
        ref = {k: _med([float(x[k]) for x in r]) for k in ("decompress_sum", "decompress_makespan",
                                                            "extract_sum", "extract_makespan", "background")}
        ref["archives"], ref["bytes"] = r[0]["archives"], r[0]["bytes"]
        ref["download_at_aggregate_cap"] = ref["bytes"] / cfg.agg_rate if cfg.agg_rate > 0 else 0.0
        ref["limit_cdn"] = max(ref["download_at_aggregate_cap"], ref["decompress_makespan"])
        ref["limit_loopback"] = ref["decompress_makespan"]
        references[plat] = ref
        for link in cfg.links:
            base = _med([s.wall for s in samples if (s.platform, s.link, s.case) == (plat, link, "baseline")])
            for case in CASES:
                ss = [s for s in samples if (s.platform, s.link, s.case) == (plat, link, case)]
                wall = _med([s.wall for s in ss])
                cases[f"{plat}/{link}/{case}"] = {
                    "platform": plat, "link": link, "case": case, "n": len(ss),
                    "wall": wall, "wall_min": min(s.wall for s in ss), "wall_max": max(s.wall for s in ss),
                    "rss_mb": _med([s.rss_mb for s in ss]), "rss_mb_max": max(s.rss_mb for s in ss),
                    "cpu": _med([s.cpu for s in ss]), "background": _med([s.background for s in ss]),
                    "requests": _med([s.server.get("requests", 0) for s in ss]),
                    "peak_connections": max(s.server.get("peak_connections", 0) for s in ss),
                    "speedup": base / wall, "x_limit": wall / ref[f"limit_{link}"],
                    "x_extract": wall / ref["extract_makespan"],
                    "failures": sum(s.exit_code != 0 for s in ss),
                    "notes": sorted({s.note for s in ss if s.note}),
                }
    return {"references": references, "cases": cases, "targets": targets(cfg, cases)}


def _target(what: str, value: float, op: str, goal: float, unit: str, failures: int) -> dict[str, Any]:
    ok = not failures and (value >= goal if op == ">=" else value <= goal)
    margin = (value - goal) / goal if op == ">=" else (goal - value) / goal
    return {"what": what, "value": value, "op": op, "goal": goal, "unit": unit, "pass": ok, "margin": margin}


def targets(cfg: Config, cases: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for plat in cfg.platforms:
        for link in cfg.links:
            c = {case: cases[f"{plat}/{link}/{case}"] for case in CASES}
            where = f"{plat:15} {link:8}"
            if link == "cdn":
                out.append(_target(f"{where} cold speedup over baseline", c["cold"]["speedup"], ">=",
                                   COLD_SPEEDUP, "x", c["cold"]["failures"] + c["baseline"]["failures"]))
                out.append(_target(f"{where} cold / physical limit", c["cold"]["x_limit"], "<=",
                                   COLD_VS_LIMIT, "x", c["cold"]["failures"]))
            out.append(_target(f"{where} warm / pure extraction", c["warm"]["x_extract"], "<=",
                               WARM_VS_EXTRACT, "x", c["warm"]["failures"]))
            out.append(_target(f"{where} no-op wall time", c["no-op"]["wall"], "<=", NOOP_SECONDS, "s",
                               c["no-op"]["failures"]))
            worst = max(("cold", "warm", "no-op"), key=lambda k: c[k]["rss_mb_max"])
            out.append(_target(f"{where} peak RSS (worst: {worst})", c[worst]["rss_mb_max"], "<=", RSS_MB,
                               "MB", c[worst]["failures"]))
    return out


def render(cfg: Config, summary: dict[str, Any], header: str) -> str:
    refs: dict[str, dict[str, float]] = summary["references"]
    lines = [header, "",
             f"{'platform':15} {'link':8} {'case':8} {'wall s':>7} {'min-max':>13} {'RSS MB':>7} "
             f"{'CPU s':>6} "
             f"{'bg':>5} {'req':>4} {'conn':>4} {'speedup':>8} {'x limit':>8} {'x extract':>9}"]
    for c in summary["cases"].values():
        noisy = "!" if c["background"] > cfg.noise else " "
        lines.append(
            f"{c['platform']:15} {c['link']:8} {c['case']:8} {c['wall']:7.2f} "
            f"{c['wall_min']:6.2f}-{c['wall_max']:<6.2f} {c['rss_mb']:7.1f} {c['cpu']:6.2f} "
            f"{c['background']:4.2f}{noisy} {c['requests']:4.0f} {c['peak_connections']:4.0f} "
            f"{c['speedup']:7.2f}x {c['x_limit']:7.2f}x {c['x_extract']:8.2f}x"
            + (" FAILED" if c["failures"] else ""))
    lines += [
        "",
        "RSS: peak RSS of the child. CPU: its user+sys. bg: cores other processes kept busy meanwhile",
        f"(! = over {cfg.noise:g}, disturbed). req/conn: requests and peak concurrent connections at the "
        "server.",
        "speedup: baseline wall / wall. x limit: wall / physical limit of the link. x extract: wall / pure",
        "extraction makespan.",
        ""]
    rows: list[tuple[str, Callable[[dict[str, float]], str]]] = [
        ("archives", lambda r: f"{r['archives']:.0f}, {r['bytes'] / MB:.1f} MB"),
        (f"download at {cfg.agg_rate / MB:g} MB/s aggregate",
         lambda r: f"{r['download_at_aggregate_cap']:.2f} s"),
        ("pure decompression, sum", lambda r: f"{r['decompress_sum']:.2f} s"),
        (f"pure decompression, makespan on {cfg.cores} cores", lambda r: f"{r['decompress_makespan']:.2f} s"),
        ("pure extraction, sum", lambda r: f"{r['extract_sum']:.2f} s"),
        (f"pure extraction, makespan on {cfg.cores} cores", lambda r: f"{r['extract_makespan']:.2f} s"),
        ("physical limit, cdn", lambda r: f"{r['limit_cdn']:.2f} s"),
        ("physical limit, loopback", lambda r: f"{r['limit_loopback']:.2f} s"),
        ("background load during these timings", lambda r: f"{r['background']:.2f} cores"),
    ]
    lines.append(f"{'reference (medians)':44}" + "".join(f"{p:>16}" for p in cfg.platforms))
    for name, fmt in rows:
        lines.append(f"  {name:42}" + "".join(f"{fmt(refs[p]):>16}" for p in cfg.platforms))
    lines += ["", "targets"]
    for t in summary["targets"]:
        value = f"{t['value']:.2f}{t['unit']}"
        goal = f"{t['op']} {t['goal']:g}{t['unit']}"
        lines.append(f"  {'PASS' if t['pass'] else 'MISS'}  {t['what']:58} {value:>9}  (target {goal}, "
                     f"margin {100 * t['margin']:+.0f}%)")
    met = sum(bool(t["pass"]) for t in summary["targets"])
    lines.append(f"  {met} of {len(summary['targets'])} targets met")
    return "\n".join(lines)


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
    ap.add_argument("--json-out", type=Path, help="write samples, references, medians and targets here")
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
        retries=max(0, a.retries))
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
    before = package_fingerprint()
    cfg.deadline = time.monotonic() + a.budget * cfg.reps * len(cfg.platforms) * len(cfg.links) / 12
    work = a.work_dir / f"run-{os.getpid()}"
    work.mkdir()
    try:
        samples, refs = measure(cfg, mirror, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = summarize(cfg, samples, refs)
    after = package_fingerprint()
    changed = "" if after == before else (f"WARNING: cudaredist/ changed during the run (source {before} -> "
                                          f"{after}); the timings mix versions of the package")
    kind = {"pypi": "real archives built by pypi-mirror.sh", "reused": "real archives (reused mirror)",
            "synthetic": "synthetic archives of the real sizes"}[mirror.kind]
    header = (f"cudaredist install benchmark: CUDA {mirror.label}, profile nvcc"
              f"{' + cuda_nvrtc' if cfg.with_nvrtc else ''}; {kind}\n"
              f"{cfg.reps} rep(s), medians; {cfg.cores} cores; cdn link: {cfg.conn_rate / MB:g} MB/s per "
              f"connection, {cfg.agg_rate / MB:g} MB/s aggregate, {cfg.ttfb * 1000:g} ms to first byte; "
              f"loopback: unthrottled" + (f"\n{changed}" if changed else ""))
    text = render(cfg, summary, header)
    print(text)
    log(f"total {time.monotonic() - t0:.0f}s; mirror {mirror.root}; cudaredist: "
        f"{' '.join(cfg.cudaredist + cfg.extra_args)}")
    if a.json_out:
        a.json_out.write_text(json.dumps({
            "config": {k: v for k, v in asdict(cfg).items() if k != "deadline"},
            "mirror": {"root": str(mirror.root), "kind": mirror.kind, "label": mirror.label},
            "host": {"python": sys.version, "machine": pyplatform.platform(), "cores": cfg.cores},
            "git": _git(), "package_source": {"before": before, "after": after},
            "seconds": time.monotonic() - t0, "samples": [asdict(s) for s in samples],
            "references": refs, "summary": summary, "table": text}, indent=1) + "\n")
    return 1 if any(s.exit_code for s in samples) else 0


if __name__ == "__main__":
    sys.exit(main())
