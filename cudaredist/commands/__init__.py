"""The commands' shared parts: options, the error boundary, and commands grouped by what they act on."""

# Set by :func:`cudaredist.entry.main` before the command line is imported, for `cudaredist install ...`:
# the command line then imports and builds the install command alone (the one run most often, whose
# no-op is mostly interpreter start-up and imports).
install_only = False
