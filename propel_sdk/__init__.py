"""propel_sdk: what a solver trainer needs to consume frontier tasks (importable without torch)."""
