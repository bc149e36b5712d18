"""The install: a staged tree swapped into a prefix under its lock (:mod:`.transaction`), built by
:mod:`.build` from the cache. :func:`cudaredist.api.install` is the call above it."""

from __future__ import annotations

from cudaredist.install.transaction import Installer, InstallResult, swap_into_place

__all__ = ["InstallResult", "Installer", "swap_into_place"]
