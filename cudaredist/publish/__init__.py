"""What a run resolved, written for others: lock files (:mod:`.lockfile`) and redist-shaped
mirrors (:mod:`.mirror`). Above the sources: it reads their plans and the
:class:`~cudaredist.sources.mirroring.MirrorContent` they return, they never import it."""
