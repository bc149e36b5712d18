"""benchmarks/before_after.py, the profile before and after of issue 37: each phase is timed by wrapping
its owner as the owner's module loads, so the phases of a real install add up to its wall time, and a
no-op shows none of the phases it never reaches."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.hosts import posix_only

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
PARTS = ("start-up", "resolve", "build", "host fix", "record", "sbom", "rest")


@posix_only("the benchmark waits for its child with os.wait4")
def test_the_phases_of_an_install_and_of_its_no_op(mirror: Path, tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCHMARKS))  # here, not at collection: the Windows host collects this too
    import before_after

    args = ["install", "13.0", "--platform", "linux-x86_64", "--base-url", str(mirror), "--quiet"]
    cache, prefix = tmp_path / "cache", tmp_path / "cuda"

    def run(*, fresh: bool) -> dict[str, float]:
        got: dict[str, float] = before_after.one(sys.executable, before_after.REPO, args, cache, prefix,
                                                 fresh=fresh, cold=False, work=tmp_path)
        return got

    warm = run(fresh=True)  # the cache filled first (untimed), then a new prefix from it
    assert (prefix / "bin").is_dir()
    assert all(warm[p] > 0 for p in PARTS if p != "rest"), warm
    assert abs(sum(warm[p] for p in PARTS) - warm["wall"]) < 1e-9
    assert warm["cpu"] > 0
    no_op = run(fresh=False)
    assert "build" not in no_op and "record" not in no_op and "sbom" not in no_op, no_op
    assert no_op["start-up"] > 0 and abs(sum(no_op.get(p, 0) for p in PARTS) - no_op["wall"]) < 1e-9
