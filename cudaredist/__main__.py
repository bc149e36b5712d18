"""``python -m cudaredist``: the same as the ``cudaredist`` console script."""

from cudaredist.entry import main

main()
