"""The ``cudaredist`` console script and ``python -m cudaredist``: the command line, started lean.

``cudaredist install ...`` runs often, and its no-op (the prefix already holds the request) is
mostly start-up: for it the command line imports and builds the install command alone
(:data:`cudaredist.commands.install_only`); every other command line gets every command.
"""

from __future__ import annotations

import sys


def main() -> None:
    from cudaredist import commands

    commands.install_only = sys.argv[1:2] == ["install"]
    from cudaredist.cli import main as cli_main

    cli_main()
