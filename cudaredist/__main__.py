"""``python -m cudaredist``: the same as the ``cudaredist`` console script."""

from cudaredist.cli import main

main()
