"""The ``cudaredist`` console script and ``python -m cudaredist``: the command line, started lean.

``cudaredist install ...`` runs often, and its no-op (the prefix already holds the request) is
mostly start-up: for it the command line imports and builds the install command alone
(:data:`cudaredist.commands.install_only`); every other command line gets every command. The same
no-op a second time is answered before any of that (:mod:`cudaredist.noop`).
"""

from __future__ import annotations

import sys


def main() -> None:
    argv = sys.argv[1:]
    install = argv[:1] == ["install"]
    if install:
        from cudaredist import noop

        said, ident = noop.lookup(argv)
        if said is not None:  # this very command was a no-op, and the prefix has not changed since
            from cudaredist import streams

            streams.configure()
            sys.stdout.write(said[0])
            sys.stdout.flush()
            sys.stderr.write(said[1])
            sys.stderr.flush()
            return
    from cudaredist import commands

    commands.install_only = install
    if install:
        commands.noop_argv, commands.noop_before = argv, ident
    from cudaredist.cli import main as cli_main

    cli_main()
