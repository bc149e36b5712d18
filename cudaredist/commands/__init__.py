"""The commands' shared parts: options, the error boundary, and commands grouped by what they act on."""
