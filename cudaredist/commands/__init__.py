"""The commands' shared parts: options, the error boundary, and commands grouped by what they act on."""

# Set by :func:`cudaredist.entry.main` for `cudaredist install ...`: the command line builds that one alone.
install_only = False
