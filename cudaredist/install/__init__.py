"""The install: a staged tree swapped into a prefix under its lock (:mod:`.transaction`), built by
:mod:`.build` from the cache. :func:`cudaredist.api.install` is the call above it."""

from __future__ import annotations

from cudaredist.install.transaction import Installer, InstallResult, swap_into_place
from cudaredist.prefixes import prefix_lock, recover

__all__ = ["InstallResult", "Installer", "prefix_lock", "recover", "swap_into_place"]
