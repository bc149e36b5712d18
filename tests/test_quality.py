"""The code stays typed and linted: mypy --strict and ruff run as part of the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, text=True, capture_output=True,
                          timeout=600)


# The sources are the same on every host: they are checked once, by the Linux stage (the Windows
# CPython gets the project and its test extras, not the linters).
linted_on_linux = pytest.mark.skipif(sys.platform == "win32", reason="host-independent: ruff and mypy "
                                     "check the sources under the Linux CPython")


@linted_on_linux
def test_mypy_strict_passes() -> None:
    r = run("mypy", "cudaredist", "action/steps.py")  # the actions' steps too (stdlib only)
    assert r.returncode == 0, r.stdout + r.stderr


@linted_on_linux
def test_ruff_passes() -> None:
    r = run("ruff", "check", "cudaredist", "tests", "benchmarks", "action")
    assert r.returncode == 0, r.stdout + r.stderr


def _loaded_after(imports: str, watched: tuple[str, ...]) -> list[str]:
    """Which of ``watched`` a fresh interpreter holds after ``imports`` (a statement)."""
    code = f"import sys; {imports}; print(' '.join(m for m in {watched!r} if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], text=True, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_fast_start_imports_nothing_heavy() -> None:
    """`--help` and the no-op path must not pay for httpx, tqdm or the archive modules."""
    assert _loaded_after("from cudaredist import cli", ("httpx", "tqdm", "tarfile", "zipfile", "truststore",
                                                        "pydantic", "rich", "packaging")) == []


def test_a_warm_install_imports_no_url_or_mail_parsers() -> None:
    """What a warm install loads (the installer, its transport, the NVIDIA source) leaves
    urllib.request and email out: 20 ms of start-up, needed only for a file:// URL and a server's
    Retry-After date."""
    warm = "import cudaredist.install, cudaredist.fetch.transport, cudaredist.sources.nvidia.source"
    assert _loaded_after(warm, ("urllib.request", "email.utils", "http.client")) == []


_OTHER_COMMANDS = ("cudaredist.commands.cache",
                   "cudaredist.commands.prefix", "cudaredist.commands.source")


@pytest.mark.parametrize("args", [["install", "--help"], ["--help"]])
def test_install_starts_without_the_other_commands(args: list[str]) -> None:
    """`cudaredist install` (whose no-op is mostly start-up) imports and builds its own command only;
    any other command line has them all."""
    # told by an exit handler: the console script ends the process once the command is done
    code = ("import atexit, sys; from cudaredist.entry import main\n"
            f"sys.argv = ['cudaredist', *{args!r}]\n"
            f"others = {_OTHER_COMMANDS!r}\n"
            "atexit.register(lambda: print('LOADED', *(m for m in others if m in sys.modules)))\n"
            "main()")
    r = subprocess.run([sys.executable, "-c", code], text=True, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    loaded = r.stdout.rsplit("LOADED", 1)[1].split()
    if args[0] == "install":
        assert "Usage: cudaredist install [OPTIONS] [TRAIN]..." in r.stdout
        assert loaded == []
    else:
        assert loaded == list(_OTHER_COMMANDS)
        assert "doctor" in r.stdout and "install" in r.stdout


# The floors of docs/architecture.md, top to bottom: a module imports only from its floor or below.
_FLOORS = [
    ("cudaredist.__main__", 7), ("cudaredist.entry", 7), ("cudaredist.cli", 7), ("cudaredist.commands", 7),
    ("cudaredist.api", 6),
    ("cudaredist.publish", 5),
    ("cudaredist.install", 4), ("cudaredist.record", 4), ("cudaredist.redo", 4), ("cudaredist.prefixes", 4),
    ("cudaredist.sbom", 4), ("cudaredist.drift", 4),
    ("cudaredist.managed", 4),
    ("cudaredist.envexport", 4), ("cudaredist.doctor", 4),
    ("cudaredist.hostcc", 4), ("cudaredist.msvc", 4), ("cudaredist.compat", 4),
    ("cudaredist.sources", 3),
    ("cudaredist.fetch.fetcher", 2),
    ("cudaredist.cache", 1), ("cudaredist.tree", 1), ("cudaredist.hostfixes", 1),
    ("cudaredist.fetch", 0),
    *((f"cudaredist.{core}", 0) for core in ("plan", "profiles", "errors", "localfs", "fsops", "hashing",
                                              "progress", "streams", "trust", "interrupts", "installdir")),
]


def _floor(module: str) -> tuple[str, int] | None:
    if module == "cudaredist":
        return module, 0
    return next(((name, floor) for name, floor in _FLOORS if module == name or module.startswith(name + ".")),
                None)


def test_imports_go_down_the_floors() -> None:
    import ast

    root = Path(__file__).resolve().parents[1] / "cudaredist"
    upward = []
    unplaced = []  # a module on no floor: docs/architecture.md and _FLOORS must name it
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        placed = _floor(module)
        if placed is None:
            unplaced.append(module)
            continue
        floor = placed[1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                theirs = _floor(name) if name.startswith("cudaredist") else None
                if theirs is not None and theirs[1] > floor:
                    upward.append(f"{module} (floor {floor}) imports {name} (floor {theirs[1]})")
    assert (upward, unplaced) == ([], [])


def _imports() -> dict[str, set[str]]:
    """Each module of cudaredist -> the modules of cudaredist it imports, anywhere in it (at the top,
    in a function, under TYPE_CHECKING: a function-level import hides a circle, it does not end it)."""
    import ast

    root = Path(__file__).resolve().parents[1] / "cudaredist"
    paths = {".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): p
             for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        graph[module] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join([*package.split(".")[:len(package.split(".")) + 1 - node.level]
                                 * bool(node.level), *[node.module or ""] * bool(node.module)])
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names]
            else:
                continue
            graph[module] |= {n for n in names if n in paths and n != module}
    return graph


def test_no_import_circles() -> None:
    """Issue 48: a circle is a module holding two jobs; move the second job out of one module."""
    graph = _imports()
    reach = {m: set(graph[m]) for m in graph}  # every module each one leads to
    for m in graph:
        todo = list(reach[m])
        while todo:
            for n in graph[todo.pop()] - reach[m]:
                reach[m].add(n)
                todo.append(n)
    assert sorted(m for m in graph if m in reach[m]) == []


def _room_floors() -> dict[str, int]:
    """Each room's floor: a package (folder) of cudaredist is one room, a top-level module another; a
    room's floor is 1 + the highest floor of a room it imports (any of its modules, anywhere in them)."""
    def room(module: str) -> str:
        part = (module.split(".") + ["__init__"])[1]
        return part + "/" if (ROOT / "cudaredist" / part).is_dir() else part

    rooms: dict[str, set[str]] = {}
    for module, imported in _imports().items():
        rooms.setdefault(room(module), set()).update(room(n) for n in imported)
    floors: dict[str, int] = {}

    def floor(r: str, below: tuple[str, ...] = ()) -> int:
        assert r not in below, f"rooms in a circle: {below}"
        if r not in floors:
            floors[r] = 1 + max((floor(n, (*below, r)) for n in rooms[r] - {r}), default=0)
        return floors[r]

    for r in rooms:
        floor(r)
    return floors


def _documented(heading: str) -> str:
    """The section of docs/architecture.md under ``heading`` (up to the next one)."""
    text = "\n" + (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def test_at_most_13_floors_and_the_picture_shows_them() -> None:
    """Issue 48: at most 13 floors of rooms, drawn as they are in docs/architecture.md's picture."""
    floors = _room_floors()
    assert max(floors.values()) <= 13
    import re

    picture = _documented("## The floors, room by room")
    drawn = {r: int(f) for f, rooms in re.findall(r"(?m)^ *(\d+) {2,}(.+)$", picture) for r in rooms.split()}
    assert drawn == floors


def test_floors_table_is_the_documented_one() -> None:
    """_FLOORS is docs/architecture.md's table of floors (its modules, less the files named in brackets)."""
    import re

    table = {}
    for floor, modules in re.findall(r"(?m)^\| (\d+) [^|]*\| ([^|]+) \|", _documented("# Architecture")):
        for name in re.findall(r"`([\w/.]+)`", re.sub(r"\([^)]*\)", "", modules)):
            table["cudaredist." + name.removesuffix(".py").strip("/").replace("/", ".")] = int(floor)
    assert table == dict(_FLOORS)


def test_no_module_over_450_lines() -> None:
    root = ROOT / "cudaredist"
    lines = {p.relative_to(root).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
             for p in root.rglob("*.py")}
    assert {p: n for p, n in lines.items() if n > 450} == {}


# docs/architecture.md "One home for each rule" and "Where each rule lives": what decides each of these
# is written in one file. Each row is a pattern that spelling the rule a second time would repeat (its
# definition, or the library call or literal that implements it); the ids name the tables' rows.
_ONE_HOME = [
    # -- "One home for each rule"
    pytest.param(r"\bos\.name\b", "fsops.py", id="windows-flag"),
    pytest.param(r"platform\.(system|machine)\(|\bor host_platform\(\)", "profiles.py", id="host-platform"),
    pytest.param(r'startswith\("windows', "profiles.py", id="windows-target"),
    pytest.param(r"\bdef evict\b|\.evict\(", "cache/store.py", id="cache-eviction"),
    pytest.param(r'LOCK_TIMEOUT = |environ\.get\(ENV_LOCK_TIMEOUT|envvar="CUDAREDIST_LOCK_TIMEOUT"',
                 "cache/store.py", id="lock-timeout"),
    # -- "Where each rule lives"
    pytest.param(r"\bdef version_key\b", "plan.py", id="version-sort"),
    pytest.param(r"\bdef (pick_release|check_train)\b", "sources/nvidia/releases.py", id="train-to-release"),
    pytest.param(r"\bdef parse_manifest\b", "sources/nvidia/manifest.py", id="manifest-validation"),
    pytest.param(r"\bdef (archive_url|join_url)\b", "plan.py", id="archive-url"),
    pytest.param(r"\bCHANNELS\b", "sources/nvidia/index.py", id="channel-base"),
    pytest.param(r"(?m)^def (env_base|product_base)\(", "sources/nvidia/products.py", id="product-folder"),
    pytest.param(r"\btomllib\b", "profiles.py", id="manifests-data"),
    pytest.param(r'\bipaddress\b|\bdef is_loopback\b|\bdef refused_hop\b|"127\.|"\[?::1\]?"', "trust.py",
                 id="trusted-origins"),
    pytest.param(r"\.history\b", "fetch/transport.py", id="redirect-hops"),
    pytest.param(r"\btrust_env\b|_transport_for_url|\bmounts=", "fetch/client.py", id="proxy-choice"),
    pytest.param(r"\btruststore\b|parsedate_to_datetime|Retry-After", "fetch/client.py", id="tls-retry"),
    pytest.param(r"\bdef check_where\b", "sources/base.py", id="option-urls"),
    pytest.param(r'"CUDAREDIST_INDEX_TTL"|\bCACHEDIR_TAG = ', "cache/store.py", id="cache-root"),
    pytest.param(r"\bdisk_usage\(|\bos\.umask\([^)]", "localfs.py", id="free-space-umask"),
    pytest.param(r"!<arch>", "tree/implib.py", id="import-libraries"),
    pytest.param(r"\bdef quote_\w+", "envexport.py", id="shell-environment"),
    pytest.param(r"\bexit_code = \d", "errors.py", id="exit-codes"),
    # an install line (redo a tree, or install a train): spelled whole, or put together in an f-string,
    # one line or two ("...cudaredist install "\n f"{release} ...")
    pytest.param(r'"cudaredist", "install"|cudaredist install (\{|"\s+f?"\{)', "redo.py",
                 id="install-line"),
    pytest.param(r"\bsignal\.signal\(", "interrupts.py", id="signal-handlers"),
]


@pytest.mark.parametrize(("pattern", "home"), _ONE_HOME)
def test_each_rule_has_one_home(pattern: str, home: str) -> None:
    import re

    root = ROOT / "cudaredist"
    found = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py")
                   if re.search(pattern, p.read_text(encoding="utf-8")))
    assert found == [home]


# the same flag meaning another thing in another command: not a shared option
_OWN_MEANING = {"--all": ("commands/prefix.py",),
                "--profile": ("commands/source.py",)}


def test_shared_options_are_declared_once() -> None:
    """An option several commands take is declared once, in commands/options.py (per meaning)."""
    import re

    root = ROOT / "cudaredist"
    where: dict[str, set[str]] = {}
    for p in root.rglob("*.py"):
        for flag in re.findall(r'typer\.Option\(\s*"(--[a-z0-9-]+)"', p.read_text(encoding="utf-8")):
            where.setdefault(flag, set()).add(p.relative_to(root).as_posix())
    twice = {flag: sorted(files - set(_OWN_MEANING.get(flag, ()))) for flag, files in where.items()}
    assert {flag: files for flag, files in twice.items() if len(files) > 1} == {}
