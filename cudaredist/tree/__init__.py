"""The tree: member-path rules, safe extraction into a staging tree, ELF soname links."""
