"""The commands' shared parts: options, the error boundary, and commands grouped by what they act on."""

# Set by :func:`cudaredist.entry.main` before the command line is imported, for `cudaredist install ...`:
# the command line then imports and builds the install command alone (the one run most often, whose
# no-op is mostly interpreter start-up and imports).
install_only = False
# The command line as the process got it, and the record's identity before it was read: for a no-op
# `install --prefix` to keep its answer (cudaredist.noop). None when not run through the entry point.
noop_argv: list[str] | None = None
noop_before: list[int] | None = None
