"""What a run resolved, written for others: lock files (:mod:`.lockfile`). Above the sources:
it reads their plans, they never import it."""
