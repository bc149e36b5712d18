"""When does a Windows (zip) install finish extracting: zips streamed (extracted while they
download, :mod:`cudaredist.tree.zipstream`) against zips extracted once complete (the rule before it).

    python benchmarks/zipstream_bench.py --mirror DIR [--reps 3] [--json-out FILE]

``DIR`` is a redist mirror with ``redistrib_13.0.2.json`` and its windows-x86_64 archives (as
bench.py builds, or tests/realmirror.py). Each run is its own process: a cold cache, a fresh
prefix, ``cudaredist install 13.0 --platform windows-x86_64`` through cdnserver.py, on each link
below; modes alternate within a repetition. Reported per run, from the start of the install:
when the last archive finished downloading, when the last one finished extracting (and how long
after the last byte that was), and the whole install's wall time. The installed trees of all runs
must be identical (exit 1 otherwise).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LINKS = {  # name: (bytes/s per connection, bytes/s in all, seconds to first byte)
    "cdn": (20e6, 200e6, 0.025),        # bench.py's CDN link
    "slow": (5e6, 25e6, 0.05),          # a runner far from the CDN
}
MODES = ("streamed", "unstreamed")


def child(mode: str, base: str, work: Path) -> dict[str, Any]:
    """One install in this process; the times its reporter saw."""
    import cudaredist.install
    import cudaredist.install.build
    import cudaredist.progress
    from cudaredist.cli import app

    if os.environ.get("ZSBENCH_ONE_RANGE"):  # one connection per archive: its bytes arrive in order
        import cudaredist.fetch.transport

        init = cudaredist.fetch.transport.Transport.__init__

        def one_range(self: cudaredist.fetch.transport.Transport, *a: Any, **kw: Any) -> None:
            init(self, *a, **kw)
            self.segment_size = 1 << 40

        cudaredist.fetch.transport.Transport.__init__ = one_range  # type: ignore[method-assign]
    if os.environ.get("ZSBENCH_WORKERS"):  # extraction threads (default: min(4, cores))
        inst_init = cudaredist.install.Installer.__init__

        def workers(self: cudaredist.install.Installer, *a: Any, **kw: Any) -> None:
            inst_init(self, *a, **kw)
            self.extract_workers = int(os.environ["ZSBENCH_WORKERS"])

        cudaredist.install.Installer.__init__ = workers  # type: ignore[method-assign]
    if mode == "unstreamed":  # the rule before zipstream: zips extracted once complete
        cudaredist.install.build.is_streamable = lambda name: not name.endswith((".zip", ".whl"))
    t0 = time.monotonic()
    seen: dict[str, list[float]] = {"downloaded": [], "extracted": []}

    class Timing(cudaredist.progress.Silent):
        def archive_done(self, name: str, size: int, *, cached: bool) -> None:
            seen["downloaded"].append(time.monotonic() - t0)

        def extracted(self, name: str) -> None:
            seen["extracted"].append(time.monotonic() - t0)

    cudaredist.progress.pick = lambda **kw: Timing()  # type: ignore[assignment]
    args = ["install", "13.0", "--platform", "windows-x86_64", "--base-url", base,
            "--prefix", str(work / "prefix"), "--cache-dir", str(work / "cache")]
    try:
        app(args, standalone_mode=False)
    except SystemExit as exc:
        if exc.code:
            raise
    wall = time.monotonic() - t0
    return {"mode": mode, "wall": wall, "downloaded": max(seen["downloaded"]),
            "extracted": max(seen["extracted"]), "archives": len(seen["extracted"]),
            "tree": tree_digest(work / "prefix")}


def tree_digest(root: Path) -> str:
    """Paths, modes and contents of the installed tree (less its install record, which has a date)."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel.startswith(".cudaredist") or p.is_dir():
            continue
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
        h.update(f"{rel} {p.stat().st_mode & 0o777:o} {digest}\n".encode())
    return h.hexdigest()


def serve(root: Path, link: str) -> tuple[subprocess.Popen[str], str]:
    conn, agg, ttfb = LINKS[link]
    proc = subprocess.Popen([sys.executable, str(HERE / "cdnserver.py"), "--root", str(root), "--conn-rate",
                             str(conn), "--agg-rate", str(agg), "--ttfb", str(ttfb), "--max-seconds", "1800"],
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http://127.0.0.1:"):
        proc.kill()
        raise SystemExit("cdnserver.py did not start")
    return proc, url


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mirror", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--links", default=",".join(LINKS))
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--workers", type=int, help="extraction threads (default: the installer's)")
    ap.add_argument("--one-range", action="store_true",
                    help="download each archive over one connection, not several byte ranges")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "BASE", "WORK"), help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    if ns.child:
        print(json.dumps(child(ns.child[0], ns.child[1], Path(ns.child[2]))))
        return 0
    rows: list[dict[str, Any]] = []
    for link in ns.links.split(","):
        proc, base = serve(ns.mirror.resolve(), link)
        try:
            for rep in range(ns.reps):
                order = MODES if rep % 2 == 0 else MODES[::-1]
                for mode in order:
                    with tempfile.TemporaryDirectory(prefix="zsbench-") as work:
                        out = subprocess.run([sys.executable, __file__, "--mirror", str(ns.mirror), "--child",
                                              mode, base, work], capture_output=True, text=True, timeout=600,
                                             env={**os.environ, "NO_PROXY": "127.0.0.1",
                                                  "ZSBENCH_ONE_RANGE": "1" if ns.one_range else "",
                                                  "ZSBENCH_WORKERS": str(ns.workers or "")},
                                             check=False)
                    if out.returncode:
                        print(out.stderr, file=sys.stderr)
                        return 1
                    row = json.loads(out.stdout.strip().splitlines()[-1]) | {"link": link, "rep": rep}
                    rows.append(row)
                    print(f"{link:5} {mode:10} rep {rep}: downloaded {row['downloaded']:.2f}s  "
                          f"extracted {row['extracted']:.2f}s  wall {row['wall']:.2f}s", file=sys.stderr)
        finally:
            proc.terminate()
            proc.wait(10)
    print(f"\n{'link':6}{'mode':12}{'downloaded s':>14}{'extracted s':>13}{'after last byte s':>19}"
          f"{'wall s':>9}   (medians of {ns.reps})")
    for link in ns.links.split(","):
        for mode in MODES:
            sel = [r | {"tail": r["extracted"] - r["downloaded"]} for r in rows
                   if r["link"] == link and r["mode"] == mode]
            med = {k: statistics.median(r[k] for r in sel)
                   for k in ("downloaded", "extracted", "tail", "wall")}
            print(f"{link:6}{mode:12}{med['downloaded']:14.2f}{med['extracted']:13.2f}{med['tail']:19.2f}"
                  f"{med['wall']:9.2f}")
    trees = {r["tree"] for r in rows}
    print(f"\ninstalled trees: {'all identical' if len(trees) == 1 else 'DIFFER'} ({len(rows)} installs)")
    if ns.json_out:
        ns.json_out.write_text(json.dumps(rows, indent=2))
    return 0 if len(trees) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
