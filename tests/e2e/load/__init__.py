"""Load and soak tests (real PostgreSQL; kept under about a minute each)."""
