"""Shared utilities at the bottom of ``curriculum``: the solver contract (:mod:`.solver_api`), atomic
file writes, tiny test/example models and the pretraining corpus type. Imports nothing else of ``curriculum``."""
