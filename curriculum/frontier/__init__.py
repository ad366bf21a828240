"""Following the solver: trainer outcomes as labels, their staleness, drift re-measurement, the primary
probe's refresh when the solver moves, and the frontier view (see ``docs/FRONTIER.md``)."""
