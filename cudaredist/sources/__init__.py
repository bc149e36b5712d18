"""Sources: where releases come from. A source turns a train into a :class:`~cudaredist.plan.Plan`."""
