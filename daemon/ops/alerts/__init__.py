"""Collapse alerts: rules (and rule files), pure evaluation, sinks, and the per-cycle manager."""
