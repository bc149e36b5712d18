"""Every command's --help scans: options grouped by purpose (commands/options.py PANELS), plain
metavars, `install` first at the top level."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter

import pytest
import typer
from typer.testing import CliRunner

from cudaredist.cli import app
from cudaredist.commands.options import COMMAND_PANELS, PANELS

ROOT = typer.main.get_command(app)


def _commands() -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for name, cmd in ROOT.commands.items():  # type: ignore[attr-defined]
        out.append((name,))
        out += [(name, sub) for sub in getattr(cmd, "commands", {})]
    return out


def _sections(text: str) -> dict[str, list[str]]:
    """Section title -> the option names (or argument/command names) listed under it."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if re.fullmatch(r"[A-Z][A-Za-z ]+:", line):
            current = sections.setdefault(line[:-1], [])
        elif current is not None and line.startswith("  ") and not line.startswith("   "):
            current += re.findall(r"(?<![\w-])(--?[\w-]+|[\[{]?[A-Z]+[\]}]?\.*|[a-z]+)(?=[ ,]|$)",
                                  line.strip().split("  ")[0])[:3]
    return sections


def _help(*args: str) -> str:
    r = CliRunner().invoke(app, [*args, "--help"], terminal_width=100)
    assert r.exit_code == 0, r.output
    return r.output


def test_install_help_groups_its_options() -> None:
    sections = _sections(_help("install"))
    assert list(sections) == ["Arguments", *PANELS]
    assert "--prefix" in sections["Install location"] and "--base-url" in sections["Where from"]
    assert "--profile" in sections["Which toolkit"] and "--json" in sections["Output"]


@pytest.mark.parametrize("command", _commands(), ids=" ".join)
def test_every_help_scans(command: tuple[str, ...]) -> None:
    """A shared option sits in its panel in every command; click's `<str>`-style metavars never show."""
    text = _help(*command)
    columns = [line.strip().split("  ")[0] for line in text.splitlines() if line.startswith("  -")]
    assert columns and not [c for c in columns if "<" in c], columns
    sections = _sections(text)
    listed = Counter(o for title, opts in sections.items() if title != "Arguments" for o in opts
                     if o.startswith("--"))
    assert all(n == 1 for n in listed.values()), listed  # each option once
    for title, opts in PANELS.items():
        for opt in opts:
            if opt in listed and opt != "--version":
                assert opt in sections[title], (command, opt, title)
    assert "--help" in sections["Output"]


def test_top_level_lists_install_first_in_panels() -> None:
    sections = _sections(_help())
    assert list(sections)[1:] == list(COMMAND_PANELS)
    assert sections["Install and use"][0] == "install"
    listed = [c for title in COMMAND_PANELS for c in sections[title]]
    assert sorted(listed) == sorted(ROOT.commands)  # type: ignore[attr-defined]


def test_console_script_install_help_has_the_panels() -> None:
    """`cudaredist install --help` through the entry point (which builds the install command alone)."""
    r = subprocess.run([sys.executable, "-m", "cudaredist", "install", "--help"], text=True,
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert list(_sections(r.stdout)) == ["Arguments", *PANELS]
