"""The install dir and the names of its toolkits: where a managed toolkit lives, and the option
that names that place in a command line (what :mod:`cudaredist.managed` finds, and
:mod:`cudaredist.redo` tells the user to run)."""

from __future__ import annotations

import os
from pathlib import Path

ENV_INSTALL_DIR = "CUDAREDIST_INSTALL_DIR"


def install_dir(given: Path | str | None = None) -> Path:
    """``--install-dir`` > ``CUDAREDIST_INSTALL_DIR`` > the user data dir (platformdirs)."""
    chosen = given or os.environ.get(ENV_INSTALL_DIR)
    if chosen:
        return Path(os.path.abspath(os.path.expanduser(str(chosen))))
    import platformdirs

    return Path(platformdirs.user_data_dir("cudaredist", appauthor=False)) / "toolkits"


def toolkit_name(release: str, platform: str) -> str:
    return f"cuda-{release}-{platform}"


def install_dir_argv(root: Path) -> list[str]:
    """``--install-dir ROOT``, or nothing when ``root`` is the one a plain command uses."""
    return [] if os.path.normcase(str(install_dir(None))) == os.path.normcase(str(root)) else \
        ["--install-dir", str(root)]
